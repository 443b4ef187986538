// measure_limits: DRAM read bandwidth over a buffer larger than the last-level cache, and
// the throughput peaks of the instruction classes the backends use.
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.hpp"
#include "hw/amx_permission.hpp"
#include "hw/cpuid.hpp"
#include "perf/isa_loops.hpp"
#include "perf/perf.hpp"

namespace mxmoe::perf {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs work(thread) on `threads` threads released together; returns the wall seconds from
// the release to the last finish. The calling thread is thread 0.
double run_together(int threads, const std::function<void(int)>& work) {
  std::barrier start(threads);
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t)
    helpers.emplace_back([&, t] {
      start.arrive_and_wait();
      work(t);
    });
  start.arrive_and_wait();
  const Clock::time_point t0 = Clock::now();
  work(0);
  for (std::thread& h : helpers) h.join();
  return seconds_since(t0);
}

// An anonymous mapping populated up front (faulting pages in while timing would measure the
// kernel). Small pages, like the heap memory that holds weights: transparent huge pages are
// only given on request here, and the compaction they trigger can take seconds.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes for the DRAM test");
    data_ = static_cast<std::byte*>(p);
  }
  ~Buffer() { munmap(data_, bytes_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return data_; }

 private:
  std::size_t bytes_;
  std::byte* data_;
};

using ReadLoop = std::uint64_t (*)(const std::byte*, std::size_t);

ReadLoop widest_read_loop(const IsaFeatures& isa) {
  if (isa.avx512f) return loops::read_avx512;
  if (isa.avx2) return loops::read_avx2;
  if (isa.asimd) return loops::read_neon;
  return loops::read_scalar;
}

struct Bandwidth {
  std::uint64_t buffer_bytes = 0;
  std::vector<double> one_thread, all_threads;  // GB/s of each pass
};

}  // namespace

std::uint64_t dram_buffer_bytes(const Hardware& hw, std::uint64_t requested, int threads) {
  constexpr std::uint64_t kMinBytes = 256ull << 20;
  constexpr std::uint64_t kGranule = 2ull << 20;  // a multiple of the 512-byte loop step
  const auto n = static_cast<std::uint64_t>(std::max(1, threads));
  const std::uint64_t bytes = requested > 0 ? requested : std::max(4 * hw.l3_bytes, kMinBytes);
  return std::max<std::uint64_t>(bytes / n / kGranule * kGranule, kGranule) * n;
}

namespace {

// `passes` passes on one thread, then as many on `threads` threads, each over the whole
// buffer. Several passes because other processes share this machine: the spread says how
// much, and the best pass is the reading the bench compares with.
Bandwidth measure_bandwidth(const Hardware& hw, std::uint64_t requested, int threads, int passes,
                            double& sink) {
  const std::uint64_t bytes = dram_buffer_bytes(hw, requested, threads);
  const std::uint64_t chunk = bytes / static_cast<std::uint64_t>(threads);
  const Buffer buffer(bytes);  // zero-filled private pages, each its own frame

  const ReadLoop read = widest_read_loop(hw.isa);
  Bandwidth bw;
  bw.buffer_bytes = bytes;
  for (int pass = 0; pass < passes; ++pass) {
    const Clock::time_point t0 = Clock::now();
    sink += static_cast<double>(read(buffer.data(), bytes));
    bw.one_thread.push_back(static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
  for (int pass = 0; pass < passes; ++pass) {
    const double s = run_together(threads, [&](int t) {
      sums[static_cast<std::size_t>(t)] =
          read(buffer.data() + static_cast<std::uint64_t>(t) * chunk, chunk);
    });
    for (std::uint64_t v : sums) sink += static_cast<double>(v);
    bw.all_threads.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return bw;
}

double best_of(const std::vector<double>& passes) {
  double best = 0;
  for (double v : passes) best = std::max(best, v);
  return best;
}

// Adds one measurement's passes to `limits`; the readings become the best pass so far, the
// latest readings this measurement's best.
void add_bandwidth(MachineLimits& limits, const Bandwidth& bw) {
  limits.dram_buffer_bytes = bw.buffer_bytes;
  limits.dram_latest_one_thread = best_of(bw.one_thread);
  limits.dram_latest_all_threads = best_of(bw.all_threads);
  limits.dram_passes_one_thread.insert(limits.dram_passes_one_thread.end(), bw.one_thread.begin(),
                                       bw.one_thread.end());
  limits.dram_passes_all_threads.insert(limits.dram_passes_all_threads.end(),
                                        bw.all_threads.begin(), bw.all_threads.end());
  limits.dram_gbps_one_thread = std::max(limits.dram_gbps_one_thread, limits.dram_latest_one_thread);
  limits.dram_gbps_all_threads =
      std::max(limits.dram_gbps_all_threads, limits.dram_latest_all_threads);
  ++limits.dram_measurements;
}

// The documented issue rate of a class's instruction on this CPU (ops per cycle per core,
// a multiply-add counting 2), from the vendors' optimisation manuals; {0, ""} where the rate
// depends on what cpuid cannot tell (an Intel AVX-512 part with one or two 512-bit FMA
// units) or no figure is kept here.
struct Rate {
  double ops_per_cycle = 0;
  std::string source;
};

struct CpuSignature {
  bool intel = false, amd = false;
  unsigned family = 0, model = 0;
};

CpuSignature cpu_signature(const Hardware& hw) {
  CpuSignature sig;
  if (!hw::is_x86()) return sig;
  sig.intel = hw.vendor == "GenuineIntel";
  sig.amd = hw.vendor == "AuthenticAMD";
  const std::uint32_t eax = hw::cpuid(1).eax;
  const unsigned base_family = (eax >> 8) & 0xF;
  sig.family = base_family == 0xF ? base_family + ((eax >> 20) & 0xFF) : base_family;
  sig.model = (eax >> 4) & 0xF;
  if (base_family == 0x6 || base_family == 0xF) sig.model |= ((eax >> 16) & 0xF) << 4;
  return sig;
}

Rate documented_rate(const std::string& name, const Hardware& hw) {
  const CpuSignature cpu = cpu_signature(hw);
  const IsaFeatures& isa = hw.isa;
  // Intel cores since Skylake: AVX-512, AVX-VNNI or AMX mark them (a Haswell/Broadwell part
  // issues one vpmaddubsw per cycle, not two).
  const bool intel_skylake_on = cpu.intel && (isa.avx512f || isa.avx_vnni || isa.amx_tile);
  const bool zen1 = cpu.amd && cpu.family == 0x17 && cpu.model < 0x30;
  const bool zen2_on = cpu.amd && (cpu.family > 0x17 || (cpu.family == 0x17 && cpu.model >= 0x30));
  if (name == "fp32_fma_avx2") {
    if (cpu.intel) return {32, "vfmadd231ps ymm: 2 per cycle (two 256-bit FMA ports, Intel since Haswell)"};
    if (zen1) return {16, "vfmadd231ps ymm: 1 per cycle (Zen/Zen+: two 128-bit FMA pipes)"};
    if (zen2_on) return {32, "vfmadd231ps ymm: 2 per cycle (two 256-bit FMA pipes, AMD since Zen 2)"};
  }
  if (name == "fp32_fma_avx512") {
    if (cpu.intel && isa.amx_tile)
      return {64, "vfmadd231ps zmm: 2 per cycle (two 512-bit FMA units, Xeon since Sapphire Rapids)"};
    if (cpu.amd && cpu.family == 0x19)
      return {32, "vfmadd231ps zmm: 1 per cycle (Zen 4: 512-bit ops on two 256-bit pipes)"};
  }
  if (name == "int8_vnni_avx512" && cpu.intel && isa.amx_tile)
    return {256, "vpdpbusd zmm: 2 per cycle (two 512-bit FMA units, Xeon since Sapphire Rapids)"};
  if (name == "int8_maddubs_avx2" && intel_skylake_on)
    return {128, "vpmaddubsw ymm: 2 per cycle (ports 0 and 1, Intel since Skylake)"};
  if (name == "int16_madd_avx2" && intel_skylake_on)
    return {64, "vpmaddwd ymm: 2 per cycle (ports 0 and 1, Intel since Skylake)"};
  if (name == "int8_amx" && cpu.intel)
    return {2048, "tdpbssd: 16x16x64 products per tile op, 1 per 16 cycles"};
  if (name == "bf16_amx" && cpu.intel)
    return {1024, "tdpbf16ps: 16x16x32 products per tile op, 1 per 16 cycles"};
  return {};
}

struct PeakLoop {
  const char* name;
  const char* unit;
  double ops_per_iteration;
  double (*run)(std::int64_t);
  // "" when usable on hw, else why not.
  std::function<std::string(const IsaFeatures&)> missing;
};

std::string need(bool ok, const char* what) {
  return ok ? std::string() : std::string("needs ") + what + " (not usable on this Hardware)";
}

std::vector<PeakLoop> peak_loops(const Hardware& hw) {
  return {
      {"fp32_fma_avx512", "GFLOP/s", loops::kFmaAvx512Ops, loops::fma_avx512,
       [](const IsaFeatures& i) { return need(i.avx512f, "avx512f"); }},
      {"fp32_fma_avx2", "GFLOP/s", loops::kFmaAvx2Ops, loops::fma_avx2,
       [](const IsaFeatures& i) { return need(i.avx2 && i.fma, "avx2 and fma"); }},
      {"bf16_dp_avx512", "GFLOP/s", loops::kBf16DpAvx512Ops, loops::bf16_dp_avx512,
       [](const IsaFeatures& i) { return need(i.avx512f && i.avx512_bf16, "avx512_bf16"); }},
      {"int8_vnni_avx512", "GOP/s", loops::kVnniAvx512Ops, loops::vnni_avx512,
       [](const IsaFeatures& i) { return need(i.avx512f && i.avx512_vnni, "avx512_vnni"); }},
      {"int8_maddubs_avx2", "GOP/s", loops::kMaddubsAvx2Ops, loops::maddubs_avx2,
       [](const IsaFeatures& i) { return need(i.avx2, "avx2"); }},
      {"int16_madd_avx2", "GOP/s", loops::kMaddwdAvx2Ops, loops::maddwd_avx2,
       [](const IsaFeatures& i) { return need(i.avx2, "avx2"); }},
      {"int8_vnni_avx", "GOP/s", loops::kVnniAvxOps, loops::vnni_avx,
       [](const IsaFeatures& i) { return need(i.avx2 && i.avx_vnni, "avx_vnni"); }},
      {"int8_amx", "GOP/s", loops::kAmxInt8Ops, loops::amx_int8,
       [](const IsaFeatures& i) {
         return need(i.amx_tile && i.amx_int8, "amx_tile and amx_int8");
       }},
      {"bf16_amx", "GFLOP/s", loops::kAmxBf16Ops, loops::amx_bf16,
       [](const IsaFeatures& i) {
         return need(i.amx_tile && i.amx_bf16, "amx_tile and amx_bf16");
       }},
      {"fp32_fma_neon", "GFLOP/s", loops::kFmaNeonOps, loops::fma_neon,
       [](const IsaFeatures& i) { return need(i.asimd, "asimd"); }},
      {"int16_smlal_neon", "GOP/s", loops::kSmlalNeonOps, loops::smlal_neon,
       [](const IsaFeatures& i) { return need(i.asimd, "asimd"); }},
      {"int8_sdot_neon", "GOP/s", loops::kSdotNeonOps, loops::sdot_neon,
       [](const IsaFeatures& i) { return need(i.asimd && i.asimddp, "asimddp"); }},
      {"int8_smmla_neon", "GOP/s", loops::kSmmlaNeonOps, loops::smmla_neon,
       [](const IsaFeatures& i) { return need(i.asimd && i.i8mm, "i8mm"); }},
      {"int8_sdot_sve", "GOP/s", loops::sdot_sve_ops(hw.sve_vector_bits), loops::sdot_sve,
       [](const IsaFeatures& i) { return need(i.sve, "sve"); }},
  };
}

// Iterations of one loop for a run of about 1 ms, calibrated on one thread (this also warms
// the unit up to its clock).
std::int64_t calibrate(const PeakLoop& loop, double& sink) {
  constexpr double kRunSeconds = 0.001;
  std::int64_t iterations = 256;
  double t = 0;
  for (;;) {
    const Clock::time_point t0 = Clock::now();
    sink += loop.run(iterations);
    t = seconds_since(t0);
    if (t >= 0.002 || iterations > (std::int64_t{1} << 40)) break;
    iterations *= 4;
  }
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(static_cast<double>(iterations) * kRunSeconds / t));
}

// Ops per second of one loop on `threads` threads: the best of several short runs, short
// enough that a run often completes without being preempted on a shared machine.
double measure_peak(const PeakLoop& loop, std::int64_t iterations, int threads, double& sink) {
  constexpr int kRuns = 16;
  std::vector<double> sums(static_cast<std::size_t>(threads));
  double best = 0;
  for (int run = 0; run < kRuns; ++run) {
    const double s = run_together(
        threads, [&](int th) { sums[static_cast<std::size_t>(th)] = loop.run(iterations); });
    for (double v : sums) sink += v;
    best = std::max(best, static_cast<double>(iterations) * loop.ops_per_iteration * threads / s);
  }
  return best;
}

// One pass of `loop` (1 thread, then all) added to `p`.
void add_peak_pass(Peak& p, const PeakLoop& loop, std::int64_t iterations, int threads,
                   double& sink) {
  p.latest_per_core = measure_peak(loop, iterations, 1, sink) / 1e9;
  p.latest_all_threads =
      threads == 1 ? p.latest_per_core : measure_peak(loop, iterations, threads, sink) / 1e9;
  p.passes_per_core.push_back(p.latest_per_core);
  p.passes_all_threads.push_back(p.latest_all_threads);
  p.per_core = std::max(p.per_core, p.latest_per_core);
  p.all_threads = std::max(p.all_threads, p.latest_all_threads);
}

void add_steal(StealTicks& sum, const StealTicks& since) {
  const StealTicks now = steal_ticks();
  if (!since.known || !now.known) return;
  sum.known = true;
  sum.steal += now.steal - since.steal;
  sum.total += now.total - since.total;
}

double interpolate(double one, double all, int thread_count, int machine_threads) {
  if (thread_count <= 1 || machine_threads <= 1) return one;
  if (thread_count >= machine_threads) return all;
  const double f =
      static_cast<double>(thread_count - 1) / static_cast<double>(machine_threads - 1);
  return one + f * (all - one);
}

}  // namespace

StealTicks steal_ticks() {
  StealTicks t;
  std::ifstream stat("/proc/stat");
  std::string line;
  if (!stat || !std::getline(stat, line) || line.rfind("cpu ", 0) != 0) return t;
  std::istringstream fields(line.substr(4));
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  std::uint64_t v[8] = {};
  for (std::uint64_t& x : v)
    if (!(fields >> x)) return t;
  t.steal = v[7];
  for (const std::uint64_t x : v) t.total += x;
  t.known = true;
  return t;
}

double steal_pct_since(const StealTicks& since) {
  StealTicks sum;
  add_steal(sum, since);
  if (!sum.known || sum.total == 0) return std::nan("");
  return 100.0 * static_cast<double>(sum.steal) / static_cast<double>(sum.total);
}

double MachineLimits::steal_pct() const {
  const StealTicks& s = steal_while_measuring;
  if (!s.known || s.total == 0) return std::nan("");
  return 100.0 * static_cast<double>(s.steal) / static_cast<double>(s.total);
}

double Peak::latest(int thread_count, int machine_threads) const {
  if (!measured) return 0;
  return interpolate(latest_per_core, latest_all_threads, thread_count, machine_threads);
}

const Peak* MachineLimits::find_peak(const std::string& name) const {
  for (const Peak& p : peaks)
    if (p.name == name) return &p;
  return nullptr;
}

double MachineLimits::latest_dram_gbps(int thread_count) const {
  return interpolate(dram_latest_one_thread, dram_latest_all_threads, thread_count, threads);
}

double MachineLimits::dram_gbps(int thread_count) const {
  return interpolate(dram_gbps_one_thread, dram_gbps_all_threads, thread_count, threads);
}

double MachineLimits::peak(const std::string& name, int thread_count) const {
  const Peak* p = find_peak(name);
  if (p == nullptr || !p->measured) return 0;
  return interpolate(p->per_core, p->all_threads, thread_count, threads);
}

std::string peak_class_for_backend(const std::string& backend) {
  const Backend* b = find_backend(backend);
  return b == nullptr ? std::string() : std::string(b->peak_class());
}

std::vector<std::string> peak_class_names() {
  std::vector<std::string> names;
  for (const PeakLoop& loop : peak_loops(Hardware{})) names.emplace_back(loop.name);
  return names;
}

void remeasure_dram(const Hardware& hw, MachineLimits& limits, int passes) {
  if (passes < 1) throw std::invalid_argument("remeasure_dram: passes must be at least 1");
  const Clock::time_point start = Clock::now();
  const StealTicks steal = steal_ticks();
  double sink = 0;
  add_bandwidth(limits, measure_bandwidth(hw, limits.dram_buffer_bytes,
                                          std::max(1, limits.threads), passes, sink));
  volatile double keep = sink;
  static_cast<void>(keep);
  add_steal(limits.steal_while_measuring, steal);
  limits.measure_seconds += seconds_since(start);
}

void remeasure_peak(const Hardware& hw, MachineLimits& limits, const std::string& name) {
  auto it = std::find_if(limits.peaks.begin(), limits.peaks.end(),
                         [&](const Peak& p) { return p.name == name; });
  if (it == limits.peaks.end() || !it->measured) return;
  const std::vector<PeakLoop> loops = peak_loops(hw);
  const auto loop = std::find_if(loops.begin(), loops.end(),
                                 [&](const PeakLoop& l) { return name == l.name; });
  if (loop == loops.end() || !loop->missing(hw.isa).empty()) return;
  const Clock::time_point start = Clock::now();
  const StealTicks steal = steal_ticks();
  double sink = 0;
  add_peak_pass(*it, *loop, calibrate(*loop, sink), std::max(1, limits.threads), sink);
  volatile double keep = sink;
  static_cast<void>(keep);
  add_steal(limits.steal_while_measuring, steal);
  limits.measure_seconds += seconds_since(start);
}

MachineLimits measure_limits(const Hardware& hw, const LimitsOptions& options) {
  if (options.peak_passes < 1 || options.peak_passes > 1000)
    throw std::invalid_argument("measure_limits: peak_passes must be in 1..1000");
  const Clock::time_point start = Clock::now();
  const StealTicks steal = steal_ticks();
  MachineLimits limits;
  limits.cpu = hw.model;
  limits.threads = std::max(1, options.threads > 0 ? options.threads : hw.logical_cpus);
  limits.l3_bytes = hw.l3_bytes;
  double sink = 0;

  constexpr int kDramPasses = 5;
  add_bandwidth(limits, measure_bandwidth(hw, options.dram_buffer_bytes, limits.threads,
                                          kDramPasses, sink));

  const std::vector<PeakLoop> loops = peak_loops(hw);
  std::vector<std::int64_t> iterations(loops.size(), 0);
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const PeakLoop& loop = loops[i];
    Peak p;
    p.name = loop.name;
    p.unit = loop.unit;
    p.note = loop.missing(hw.isa);
    if (p.note.empty() && p.name.find("amx") != std::string::npos)
      p.note = hw::request_amx_tile_permission();
    if (p.note.empty()) {
      p.measured = true;
      iterations[i] = calibrate(loop, sink);
      const Rate rate = documented_rate(p.name, hw);
      p.ops_per_cycle = rate.ops_per_cycle;
      p.rate_source = rate.source;
    }
    limits.peaks.push_back(std::move(p));
  }
  // Rounds over the classes: each class's passes are spread over the whole measurement, so
  // a disturbance shows as the spread of every class, not as one class's low reading.
  for (int round = 0; round < options.peak_passes; ++round) {
    for (std::size_t i = 0; i < loops.size(); ++i)
      if (limits.peaks[i].measured)
        add_peak_pass(limits.peaks[i], loops[i], iterations[i], limits.threads, sink);
    ++limits.peak_measurements;
  }
  volatile double keep = sink;  // the checksums are the loops' only observable effect
  static_cast<void>(keep);
  add_steal(limits.steal_while_measuring, steal);
  limits.measure_seconds = seconds_since(start);
  return limits;
}

}  // namespace mxmoe::perf
