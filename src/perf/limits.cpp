// measure_limits: DRAM read bandwidth over a buffer larger than the last-level cache, and
// the throughput peaks of the instruction classes the backends use.
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hw/amx_permission.hpp"
#include "mxmoe/perf.hpp"
#include "perf/isa_loops.hpp"

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
  return loops::read_scalar;
}

struct Bandwidth {
  std::uint64_t buffer_bytes = 0;
  std::vector<double> one_thread, all_threads;  // GB/s of each pass
};

// kPasses passes on one thread, then kPasses on `threads` threads, each over the whole
// buffer. Several passes because other processes share this machine: the spread says how
// much, and the best pass is the reading the bench compares with.
Bandwidth measure_bandwidth(const Hardware& hw, std::uint64_t requested, int threads,
                            double& sink) {
  constexpr std::uint64_t kMinBytes = 256ull << 20;
  constexpr std::uint64_t kGranule = 2ull << 20;  // a multiple of the 512-byte loop step
  constexpr int kPasses = 5;
  std::uint64_t bytes = requested > 0 ? requested : std::max(4 * hw.l3_bytes, kMinBytes);
  const std::uint64_t chunk = std::max<std::uint64_t>(
      bytes / static_cast<std::uint64_t>(threads) / kGranule * kGranule, kGranule);
  bytes = chunk * static_cast<std::uint64_t>(threads);
  const Buffer buffer(bytes);  // zero-filled private pages, each its own frame

  const ReadLoop read = widest_read_loop(hw.isa);
  Bandwidth bw;
  bw.buffer_bytes = bytes;
  for (int pass = 0; pass < kPasses; ++pass) {
    const Clock::time_point t0 = Clock::now();
    sink += static_cast<double>(read(buffer.data(), bytes));
    bw.one_thread.push_back(static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
  for (int pass = 0; pass < kPasses; ++pass) {
    const double s = run_together(threads, [&](int t) {
      sums[static_cast<std::size_t>(t)] =
          read(buffer.data() + static_cast<std::uint64_t>(t) * chunk, chunk);
    });
    for (std::uint64_t v : sums) sink += static_cast<double>(v);
    bw.all_threads.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return bw;
}

// Adds one measurement's passes to `limits`; the readings become the best pass so far.
void add_bandwidth(MachineLimits& limits, const Bandwidth& bw) {
  limits.dram_buffer_bytes = bw.buffer_bytes;
  limits.dram_passes_one_thread.insert(limits.dram_passes_one_thread.end(), bw.one_thread.begin(),
                                       bw.one_thread.end());
  limits.dram_passes_all_threads.insert(limits.dram_passes_all_threads.end(),
                                        bw.all_threads.begin(), bw.all_threads.end());
  for (double v : bw.one_thread)
    limits.dram_gbps_one_thread = std::max(limits.dram_gbps_one_thread, v);
  for (double v : bw.all_threads)
    limits.dram_gbps_all_threads = std::max(limits.dram_gbps_all_threads, v);
  ++limits.dram_measurements;
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

std::vector<PeakLoop> peak_loops() {
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
  };
}

// Ops per second of one loop on `threads` threads: the best of several short runs, short
// enough that a run often completes without being preempted on a shared machine.
double measure_peak(const PeakLoop& loop, int threads, double& sink) {
  constexpr double kRunSeconds = 0.001;
  constexpr int kRuns = 16;
  std::int64_t iterations = 256;
  double t = 0;
  for (;;) {  // calibrate on one thread (this also warms the unit up to its clock)
    const Clock::time_point t0 = Clock::now();
    sink += loop.run(iterations);
    t = seconds_since(t0);
    if (t >= 0.002 || iterations > (std::int64_t{1} << 40)) break;
    iterations *= 4;
  }
  iterations = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(static_cast<double>(iterations) * kRunSeconds / t));
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

}  // namespace

double MachineLimits::dram_gbps(int thread_count) const {
  if (thread_count <= 1 || threads <= 1) return dram_gbps_one_thread;
  if (thread_count >= threads) return dram_gbps_all_threads;
  const double f = static_cast<double>(thread_count - 1) / static_cast<double>(threads - 1);
  return dram_gbps_one_thread + f * (dram_gbps_all_threads - dram_gbps_one_thread);
}

double MachineLimits::peak(const std::string& name, int thread_count) const {
  for (const Peak& p : peaks) {
    if (p.name != name || !p.measured) continue;
    if (thread_count <= 1 || threads <= 1) return p.per_core;
    if (thread_count >= threads) return p.all_threads;
    const double f = static_cast<double>(thread_count - 1) / static_cast<double>(threads - 1);
    return p.per_core + f * (p.all_threads - p.per_core);
  }
  return 0;
}

std::string peak_class_for_backend(const std::string& backend) {
  if (backend == "reference" || backend == "avx2") return "fp32_fma_avx2";
  if (backend == "avx512_bf16") return "bf16_dp_avx512";
  if (backend == "avx512_vnni") return "int8_vnni_avx512";
  if (backend == "avx2_int8") return "int8_maddubs_avx2";
  if (backend == "avx2_int16") return "int16_madd_avx2";
  if (backend == "avx_vnni_int8") return "int8_vnni_avx";
  if (backend == "amx_int8") return "int8_amx";
  if (backend == "amx_bf16") return "bf16_amx";
  return "";
}

void remeasure_dram(const Hardware& hw, MachineLimits& limits) {
  const Clock::time_point start = Clock::now();
  double sink = 0;
  add_bandwidth(limits,
                measure_bandwidth(hw, limits.dram_buffer_bytes, std::max(1, limits.threads), sink));
  volatile double keep = sink;
  static_cast<void>(keep);
  limits.measure_seconds += seconds_since(start);
}

MachineLimits measure_limits(const Hardware& hw, const LimitsOptions& options) {
  const Clock::time_point start = Clock::now();
  MachineLimits limits;
  limits.cpu = hw.model;
  limits.threads = std::max(1, options.threads > 0 ? options.threads : hw.logical_cpus);
  limits.l3_bytes = hw.l3_bytes;
  double sink = 0;

  add_bandwidth(limits, measure_bandwidth(hw, options.dram_buffer_bytes, limits.threads, sink));

  for (const PeakLoop& loop : peak_loops()) {
    Peak p;
    p.name = loop.name;
    p.unit = loop.unit;
    p.note = loop.missing(hw.isa);
    if (p.note.empty() && p.name.find("amx") != std::string::npos)
      p.note = hw::request_amx_tile_permission();
    if (p.note.empty()) {
      p.measured = true;
      p.per_core = measure_peak(loop, 1, sink) / 1e9;
      p.all_threads =
          limits.threads == 1 ? p.per_core : measure_peak(loop, limits.threads, sink) / 1e9;
    }
    limits.peaks.push_back(std::move(p));
  }
  volatile double keep = sink;  // the checksums are the loops' only observable effect
  static_cast<void>(keep);
  limits.measure_seconds = seconds_since(start);
  return limits;
}

}  // namespace mxmoe::perf
