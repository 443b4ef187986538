// Dense linear layers (dense_linear.hpp): the weights' checks, the candidates (their checks
// and estimates; the oracle judges them), the compact packing, and the split of the output
// rows over the pool.
#include "backends/dense/dense_linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "backends/kernel_isa.hpp"
#include "contract/cost.hpp"
#include "base/huge_pages.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::dense {

namespace {

// The largest dimension accepted: far above any model (vocab 1M, hidden 64k).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr std::string_view kFp32Class = "dense_fp32_lanes16";
constexpr std::string_view kInt8Class = "dense_int8_rows16";
constexpr std::string_view kBf16Class = "dense_bf16_pairs16";
constexpr std::string_view kInt4Class = "dense_int4_rows16";

// One kernel: its name, class, mode, the kernel set it calls (none: portable), its entry, and
// the rough sustained per-thread rates of its estimate.
struct KernelEntry {
  const char* name;
  std::string_view numerics_class;
  DenseMode mode;
  std::optional<KernelIsa> set;  // none: portable C++
  LinearF32Fn f32;
  LinearCompactFn compact;
  // Rough sustained rates per thread (weight GB/s, GFLOP/s): not measured figures; their
  // order is what ranks, and neither grows down a mode's list, so the ranking is its order.
  Throughput rates;
  std::string_view description;
  CompactLayout layout = CompactLayout::rows16;  // compact kernels: how it wants the codes
};

// Best first. A kernel of another architecture's set has no entry here (not_compiled).
#if MXMOE_X86_KERNELS
constexpr LinearF32Fn kAvx512Fp32 = &dense_fp32_lanes16_linear__avx512,
                      kAvx2Fp32 = &dense_fp32_lanes16_linear__avx2;
constexpr LinearCompactFn kVnniInt8 = &dense_int8_rows16_linear__avx512_vnni,
                          kAvx2Int8 = &dense_int8_rows16_linear__avx2;
constexpr LinearCompactFn kVnniInt4 = &dense_int4_rows16_linear__avx512_vnni,
                          kAvx2Int4 = &dense_int4_rows16_linear__avx2;
constexpr LinearF32Fn kAvx512Bf16 = &dense_bf16_pairs16_linear__avx512_bf16;
#else
constexpr LinearF32Fn kAvx512Fp32 = nullptr, kAvx2Fp32 = nullptr, kAvx512Bf16 = nullptr;
constexpr LinearCompactFn kVnniInt8 = nullptr, kAvx2Int8 = nullptr;
constexpr LinearCompactFn kVnniInt4 = nullptr, kAvx2Int4 = nullptr;
#endif
#if MXMOE_AARCH64_KERNELS
constexpr LinearF32Fn kNeonFp32 = &dense_fp32_lanes16_linear__neon;
constexpr LinearCompactFn kDotprodInt8 = &dense_int8_rows16_linear__neon_dotprod;
constexpr LinearCompactFn kDotprodInt4 = &dense_int4_rows16_linear__neon_dotprod;
#else
constexpr LinearF32Fn kNeonFp32 = nullptr;
constexpr LinearCompactFn kDotprodInt8 = nullptr, kDotprodInt4 = nullptr;
#endif

constexpr std::array<KernelEntry, 14> kKernels = {{
    {"avx512_fp32",
     kFp32Class,
     DenseMode::as_published,
     KernelIsa::avx512,
     kAvx512Fp32,
     nullptr,
     {4.0, 32.0},
     "f32/bf16 weights as published, 16 output rows in AVX-512 lanes"},
    {"avx2_fp32",
     kFp32Class,
     DenseMode::as_published,
     KernelIsa::avx2,
     kAvx2Fp32,
     nullptr,
     {3.0, 16.0},
     "f32/bf16 weights as published, 16 output rows in two AVX2 registers"},
    {"neon_fp32",
     kFp32Class,
     DenseMode::as_published,
     KernelIsa::neon,
     kNeonFp32,
     nullptr,
     {3.0, 8.0},
     "f32/bf16 weights as published, 16 output rows in four NEON registers"},
    {"portable_fp32",
     kFp32Class,
     DenseMode::as_published,
     {},
     &dense_fp32_lanes16_linear__portable,
     nullptr,
     {1.0, 2.0},
     "f32/bf16 weights as published, portable C++ (the class's definition)"},
    {"avx512_bf16_bf16",
     kBf16Class,
     DenseMode::as_published_bf16,
     KernelIsa::avx512_bf16,
     kAvx512Bf16,
     nullptr,
     {4.0, 64.0},
     "bf16 weights as published, bf16 activations, vdpbf16ps into 16 lanes a sum"},
    {"portable_bf16",
     kBf16Class,
     DenseMode::as_published_bf16,
     {},
     &dense_bf16_pairs16_linear__portable,
     nullptr,
     {1.0, 1.0},
     "bf16 weights as published, bf16 activations, portable C++ (the class's "
     "definition)"},
    {"avx512_vnni_int8",
     kInt8Class,
     DenseMode::compact_int8,
     KernelIsa::avx512_vnni,
     nullptr,
     kVnniInt8,
     {4.0, 64.0},
     "int8 codes + f32 scale per 32-block, vpdpbusd over 16 rows",
     CompactLayout::rows16_biased},
    {"avx2_int8",
     kInt8Class,
     DenseMode::compact_int8,
     KernelIsa::avx2,
     nullptr,
     kAvx2Int8,
     {3.0, 24.0},
     "int8 codes + f32 scale per 32-block, AVX2 vpmaddubsw over 16 rows"},
    {"neon_dotprod_int8",
     kInt8Class,
     DenseMode::compact_int8,
     KernelIsa::neon_dotprod,
     nullptr,
     kDotprodInt8,
     {3.0, 24.0},
     "int8 codes + f32 scale per 32-block, NEON sdot over 16 rows"},
    {"portable_int8",
     kInt8Class,
     DenseMode::compact_int8,
     {},
     nullptr,
     &dense_int8_rows16_linear__portable,
     {0.5, 2.0},
     "int8 codes + f32 scale per 32-block, portable C++ (the class's definition)"},
    {"avx512_vnni_int4",
     kInt4Class,
     DenseMode::compact_int4,
     KernelIsa::avx512_vnni,
     nullptr,
     kVnniInt4,
     {4.0, 64.0},
     "4-bit codes + bf16 scale per 32-block, vpdpbusd over 16 rows"},
    {"avx2_int4",
     kInt4Class,
     DenseMode::compact_int4,
     KernelIsa::avx2,
     nullptr,
     kAvx2Int4,
     {3.0, 24.0},
     "4-bit codes + bf16 scale per 32-block, AVX2 vpmaddubsw over 16 rows"},
    {"neon_dotprod_int4",
     kInt4Class,
     DenseMode::compact_int4,
     KernelIsa::neon_dotprod,
     nullptr,
     kDotprodInt4,
     {3.0, 24.0},
     "4-bit codes + bf16 scale per 32-block, NEON sdot over 16 rows"},
    {"portable_int4",
     kInt4Class,
     DenseMode::compact_int4,
     {},
     nullptr,
     &dense_int4_rows16_linear__portable,
     {0.5, 2.0},
     "4-bit codes + bf16 scale per 32-block, portable C++ (the class's definition)"},
}};

bool listed(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every reason kernel C cannot run OP.
std::vector<Rejection> check(const KernelEntry& c, const DenseOp& op) {
  std::vector<Rejection> out;
  const Hardware& hardware = op.hardware;
  if (op.element != ElementType::f32 && op.element != ElementType::bf16)
    out.push_back({ReasonCode::weight_format, "dense kernels read f32 or bf16 weights",
                   "f32 or bf16", fmt::format("{}", to_string(op.element)), ""});
  if (op.mode != c.mode)
    out.push_back({ReasonCode::weight_format,
                   fmt::format("the kernel runs mode {}, not {}", to_string(c.mode),
                               to_string(op.mode)),
                   fmt::format("mode {}", to_string(c.mode)),
                   fmt::format("mode {}", to_string(op.mode)),
                   fmt::format("judge the {} kernels", to_string(op.mode))});
  if (c.mode == DenseMode::as_published_bf16 && op.element != ElementType::bf16)
    out.push_back({ReasonCode::weight_format,
                   "bf16-activation kernels read bf16 weights as published",
                   "bf16 weights", fmt::format("{} weights", to_string(op.element)),
                   "use mode as_published for this layer"});
  if (c.mode == DenseMode::as_published_bf16 && op.in > kBf16MaxIn)
    out.push_back({ReasonCode::shape_alignment,
                   fmt::format("bf16-activation kernels round a token tile on the stack: the "
                               "input size must be at most {}",
                               kBf16MaxIn),
                   fmt::format("in <= {}", kBf16MaxIn), fmt::format("in = {}", op.in),
                   "use mode as_published for this layer"});
  if (is_compact(c.mode) && op.in > kCompactMaxIn)
    out.push_back({ReasonCode::shape_alignment,
                   fmt::format("compact kernels quantize a token tile on the stack: the input "
                               "size must be at most {}",
                               kCompactMaxIn),
                   fmt::format("in <= {}", kCompactMaxIn), fmt::format("in = {}", op.in),
                   "use mode as_published for this layer"});
  if (!c.set) return out;  // portable C++ runs anywhere
  for (Rejection& r : isa_rejections(*c.set, hardware)) out.push_back(std::move(r));
  return out;
}

// A kernel as the oracle judges it: KernelEntry's facts behind Candidate<DenseOp>.
class DenseKernel final : public Candidate<DenseOp> {
 public:
  explicit DenseKernel(const KernelEntry& e) : e_(e) {}
  std::string_view name() const noexcept override { return e_.name; }
  std::string_view description() const noexcept override { return e_.description; }
  std::string_view numerics_class() const noexcept override { return e_.numerics_class; }
  std::vector<Rejection> check(const DenseOp& op) const override { return dense::check(e_, op); }
  // A roofline at one row (a decode step: the weights' bytes dominate) on every CPU of the
  // Hardware: the bytes a forward call reads of the weights, 2 flops a weight.
  double estimate_us(const DenseOp& op) const override {
    const double weights = static_cast<double>(op.out) * static_cast<double>(op.in);
    const double bytes_per_weight =
        is_compact(op.mode)
            ? static_cast<double>(compact_group_block_bytes(op.mode)) / (kCompactGroupRows * kBlock)
            : (op.element == ElementType::f32 ? 4.0 : 2.0);
    const CallWork work{.weight_bytes = weights * bytes_per_weight,
                        .flops = 2.0 * weights,
                        .threads = std::max(1, op.hardware.logical_cpus)};
    return roofline_us(work, e_.rates);
  }
  const KernelEntry& entry() const noexcept { return e_; }

 private:
  const KernelEntry& e_;
};

// Each mode's kernels are one run of kKernels (candidates() hands out that run).
constexpr bool modes_are_runs() {
  for (std::size_t i = 0; i < kKernels.size(); ++i)
    for (std::size_t j = i + 1; j < kKernels.size(); ++j)
      for (std::size_t k = i + 1; k < j; ++k)
        if (kKernels[i].mode == kKernels[j].mode && kKernels[k].mode != kKernels[i].mode)
          return false;
  return true;
}
static_assert(modes_are_runs());

// The kernels, in kKernels' order, and the pointers to them (each mode's a run of them).
template <std::size_t... I>
std::array<DenseKernel, sizeof...(I)> make_kernels(std::index_sequence<I...>) {
  return {DenseKernel(kKernels[I])...};
}
struct Kernels {
  std::array<DenseKernel, kKernels.size()> all =
      make_kernels(std::make_index_sequence<kKernels.size()>{});
  std::array<const Candidate<DenseOp>*, kKernels.size()> pointers = [this] {
    std::array<const Candidate<DenseOp>*, kKernels.size()> p{};
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = &all[i];
    return p;
  }();
};
const Kernels& kernels() {
  static const Kernels k;
  return k;
}

// The kernel of MODE named NAME; nullptr when none is.
const DenseKernel* find_kernel(DenseMode mode, std::string_view name) {
  for (const DenseKernel& k : kernels().all)
    if (k.entry().mode == mode && k.name() == name) return &k;
  return nullptr;
}

// One line a reason: "    code: detail (needs R, has A); remedy".
std::string reason_lines(const std::vector<Rejection>& reasons) {
  std::string text;
  for (const Rejection& r : reasons)
    text += fmt::format("    {}: {} (needs {}, has {}){}\n", to_string(r.code), r.detail,
                        r.required, r.actual, r.remedy.empty() ? "" : "; " + r.remedy);
  return text;
}

float element_at(const void* data, ElementType e, std::int64_t i) noexcept {
  if (e == ElementType::bf16) return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
  return static_cast<const float*>(data)[i];
}

void check_weights(const LinearWeights& w) {
  const std::string what = "dense weight '" + w.name + "'";
  if (w.element != ElementType::f32 && w.element != ElementType::bf16)
    throw std::invalid_argument(what + ": element type " + std::string(to_string(w.element)) +
                                " is not f32 or bf16");
  if (w.bias != nullptr && w.bias_element != ElementType::f32 &&
      w.bias_element != ElementType::bf16)
    throw std::invalid_argument(what + ": bias element type " +
                                std::string(to_string(w.bias_element)) + " is not f32 or bf16");
  if (w.data == nullptr) throw std::invalid_argument(what + ": no data");
  if (w.out < 1 || w.out > kMaxDim || w.in < 1 || w.in > kMaxDim)
    throw std::invalid_argument(what + ": shape [" + std::to_string(w.out) + ", " +
                                std::to_string(w.in) + "] out of range (each 1.." +
                                std::to_string(kMaxDim) + ")");
}

}  // namespace

std::vector<Rejection> isa_rejections(KernelIsa set, const Hardware& hardware) {
  std::vector<Rejection> out;
  if (!kernel_isa_compiled(set))
    out.push_back({ReasonCode::not_compiled,
                   fmt::format("this build has no {} kernels", to_string(set)),
                   fmt::format("a build for {}", kernel_isa_arch(set)),
                   fmt::format("built for {}", build_info::kTargetArch),
                   fmt::format("use an {} build of mxmoe", kernel_isa_arch(set))});
  for (const std::string_view feature : kernel_isa_features(set)) {
    if (isa_feature(hardware.isa, feature).value_or(false)) continue;
    const std::string name(feature);
    if (listed(hardware.os_denied, name)) {
      out.push_back({ReasonCode::os_denied,
                     fmt::format("the CPU has {} but the OS did not grant its state", name), name,
                     "denied by the OS", "use an OS that enables this register state"});
      continue;
    }
    const std::string cap =
        hardware.isa_cap.empty() ? "" : fmt::format(" (ISA capped at '{}')", hardware.isa_cap);
    out.push_back({ReasonCode::unsupported_isa, fmt::format("the kernel needs {}", name), name,
                   fmt::format("not available on {}{}",
                               hardware.model.empty() ? "this CPU" : hardware.model, cap),
                   hardware.isa_cap.empty() ? fmt::format("run on a CPU with {}", name)
                                            : "raise or unset MXMOE_MAX_ISA"});
  }
  return out;
}

std::span<const Candidate<DenseOp>* const> candidates(DenseMode mode) noexcept {
  // kKernels lists each mode's kernels as one run: [first, first + count).
  std::size_t first = 0, count = 0;
  for (std::size_t i = 0; i < kKernels.size(); ++i)
    if (kKernels[i].mode == mode) {
      if (count == 0) first = i;
      ++count;
    }
  return std::span<const Candidate<DenseOp>* const>(kernels().pointers).subspan(first, count);
}

bool chose_isa_kernel(const LinearSelection& judged) noexcept {
  const DenseKernel* kernel = find_kernel(judged.op.mode, judged.chosen);
  return kernel != nullptr && kernel->entry().set.has_value();
}

std::string describe(const LinearSelection& s, std::string_view layer_name) {
  return fmt::format("dense '{}' ({}): {}{}\n", layer_name, to_string(s.op.mode),
                     s.chosen.empty() ? "no kernel" : s.chosen,
                     s.why.empty() ? "" : " (" + s.why + ")") +
         describe_verdicts(s.candidates, s.chosen);
}

std::string describe_verdicts(const std::vector<Verdict>& candidates, std::string_view chosen) {
  std::string text;
  for (const Verdict& v : candidates) {
    const bool estimated = v.supported && v.estimated_us > 0;  // judged by the oracle
    text += fmt::format("  {} [{}]: {}{}\n", v.name, v.numerics_class,
                        !v.supported ? "rejected" : v.name == chosen ? "chosen" : "accepted",
                        estimated ? fmt::format(", {:.1f} us", v.estimated_us) : "");
    text += reason_lines(v.reasons);
  }
  return text;
}

Linear::Linear(const LinearWeights& w, const LinearSelection& judged, ThreadPool* pack_pool)
    : w_(w), selection_(judged) {
  check_weights(w);
  const std::string what = "dense weight '" + w.name + "'";
  const DenseOp& op = judged.op;
  if (op.out != w.out || op.in != w.in || op.element != w.element)
    throw std::invalid_argument(fmt::format(
        "{}: the kernels were judged for a [{}, {}] {} layer, not this [{}, {}] {} one", what,
        op.out, op.in, to_string(op.element), w.out, w.in, to_string(w.element)));
  if (judged.chosen.empty())
    throw std::invalid_argument(what + ": no kernel runs it here\n" + describe(judged, w.name));
  const DenseKernel* kernel = find_kernel(op.mode, judged.chosen);
  if (kernel == nullptr)
    throw std::invalid_argument(fmt::format("{}: no {} kernel is named '{}'", what,
                                            to_string(op.mode), judged.chosen));
  if (const std::vector<Rejection> reasons = kernel->check(op); !reasons.empty())
    throw std::invalid_argument(fmt::format("{}: the chosen kernel {} cannot run it here\n{}",
                                            what, judged.chosen, reason_lines(reasons)));
  const KernelEntry& chosen = kernel->entry();
  kernel_name_ = chosen.name;
  f32_ = chosen.f32;
  compact_ = chosen.compact;
  const CompactLayout layout = chosen.layout;
  if (w.bias != nullptr) {
    bias_.resize(static_cast<std::size_t>(w.out));
    for (std::int64_t o = 0; o < w.out; ++o)
      bias_[static_cast<std::size_t>(o)] = element_at(w.bias, w.bias_element, o);
  }
  if (!is_compact(op.mode)) return;

  // Quantize each row's 32-blocks (the last one short when in % 32 != 0) into its group. The
  // padding rows of the last group are zero codes: +128 biased int8, +8 for int4's nibbles
  // (code 0 stored as 0x88), with scale 0.
  const std::int64_t blocks = (w.in + kBlock - 1) / kBlock;
  const std::int64_t groups = (w.out + kCompactGroupRows - 1) / kCompactGroupRows;
  const std::int64_t block_bytes = compact_group_block_bytes(op.mode);
  const bool int4 = op.mode == DenseMode::compact_int4;
  const std::uint8_t bias = int4 ? 0x88 : layout == CompactLayout::rows16_biased ? 0x80 : 0x00;
  // 2 MB pages before the first touch: a decode step streams these bytes, and 4 KB pages would
  // cost a page walk every 4 KB (as the packed experts, base/huge_pages.hpp).
  const auto packed_bytes = static_cast<std::size_t>(groups * blocks * block_bytes);
  packed_.reserve(packed_bytes);
  advise_huge_pages(packed_.data(), packed_bytes);
  packed_.assign(packed_bytes, bias);
  if (int4)  // the padding rows' scales: bf16 +0
    for (std::int64_t gb = 0; gb < groups * blocks; ++gb)
      std::memset(packed_.data() + gb * block_bytes + kCompact4GroupCodeBytes, 0,
                  kCompact4GroupBlockBytes - kCompact4GroupCodeBytes);
  auto pack_rows = [&](std::int64_t r0, std::int64_t r1) {
    float v[kBlock];
    std::int8_t codes[kBlock];
    for (std::int64_t o = r0; o < r1; ++o) {
      const std::int64_t i = o % kCompactGroupRows;
      std::uint8_t* group = packed_.data() + (o / kCompactGroupRows) * blocks * block_bytes;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const int count = static_cast<int>(std::min<std::int64_t>(kBlock, w.in - b * kBlock));
        for (int k = 0; k < count; ++k)
          v[k] = element_at(w.data, w.element, o * w.in + b * kBlock + k);
        std::uint8_t* gb = group + b * block_bytes;
        if (int4) {
          const std::uint16_t scale = quantize_block32_int4(v, count, codes);
          for (int k = 0; k < kBlock; k += 8)
            for (int j = 0; j < 4; ++j)
              gb[64 * (k / 8) + 4 * i + j] = static_cast<std::uint8_t>(
                  (codes[k + j] + kCompact4Bias) | (codes[k + 4 + j] + kCompact4Bias) << 4);
          std::memcpy(gb + kCompact4GroupCodeBytes + 2 * i, &scale, sizeof scale);
        } else {
          const float scale = quantize_block32_portable(v, count, codes);
          for (int k = 0; k < kBlock; ++k)
            gb[64 * (k / 4) + 4 * i + k % 4] = static_cast<std::uint8_t>(codes[k]) ^ bias;
          std::memcpy(gb + kCompactGroupCodeBytes + 4 * i, &scale, sizeof scale);
        }
      }
    }
  };
  constexpr std::int64_t kPackRows = 4 * kCompactGroupRows;  // whole groups: no shared bytes
  if (pack_pool == nullptr) {
    pack_rows(0, w.out);
  } else {
    pack_pool->parallel_for(
        (w.out + kPackRows - 1) / kPackRows, [&](std::int64_t task, int) {
          pack_rows(task * kPackRows, std::min(w.out, (task + 1) * kPackRows));
        });
  }
  w_.data = nullptr;  // never read again
  w_.bias = nullptr;
}

std::size_t Linear::weight_bytes() const noexcept {
  if (is_compact(selection_.op.mode)) return packed_.size();
  return static_cast<std::size_t>(w_.out * w_.in) * (w_.element == ElementType::bf16 ? 2 : 4);
}

std::int64_t Linear::rows_per_task(std::int64_t m, int threads) const noexcept {
  // Prefill (fp32, m > 8): 64 rows, whose weights stay in L2 while the token tiles sweep them.
  // The bf16 kernel sweeps a whole task with each token tile it rounds (no blocks inside):
  // 64 rows up to in = 4096 (512 KB of bf16), fewer past that, in 8-row steps.
  if (f32_ != nullptr && m > 8) {
    if (selection_.op.mode != DenseMode::as_published_bf16) return 64;
    return std::clamp<std::int64_t>((std::int64_t{256} * 1024) / w_.in / 8 * 8, 8, 64);
  }
  // Otherwise about 4 tasks a thread, in 16-row steps, at most 256 rows (a compact task
  // quantizes its tokens once: the more rows, the less that costs).
  const std::int64_t target = (w_.out + 4 * threads - 1) / (4 * threads);
  return std::clamp<std::int64_t>((target + 15) / 16 * 16, 16, 256);
}

void Linear::run_rows(const float* x, std::int64_t m, float* y, std::int64_t first,
                      std::int64_t rows) const noexcept {
  const float* bias = bias_.empty() ? nullptr : bias_.data();
  if (f32_ != nullptr) {
    f32_({w_.data, w_.element == ElementType::bf16, w_.in, x, m, y, w_.out, bias}, first, rows);
    return;
  }
  compact_({{packed_.data(), (w_.in + kBlock - 1) / kBlock, w_.out,
             compact_group_block_bytes(selection_.op.mode)},
            w_.in, x, m, y, w_.out, bias},
           first, rows);
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept {
  const Linear* self = this;
  forward_together({&self, 1}, x, m, {&y, 1}, pool);
}

void Linear::forward_together(std::span<const Linear* const> layers, const float* x,
                              std::int64_t m, std::span<float* const> ys,
                              ThreadPool& pool) noexcept {
  if (m <= 0) return;
  // kMaxTogether layers a job (no allocation): each layer's own split (rows_per_task), its
  // tasks numbered after the layers before it.
  for (std::size_t at = 0; at < layers.size(); at += kMaxTogether) {
    const std::size_t n = std::min(layers.size() - at, kMaxTogether);
    std::array<std::int64_t, kMaxTogether> rows{}, first_task{};
    std::int64_t tasks = 0;
    for (std::size_t i = 0; i < n; ++i) {
      rows[i] = layers[at + i]->rows_per_task(m, pool.size());
      first_task[i] = tasks;
      tasks += (layers[at + i]->w_.out + rows[i] - 1) / rows[i];
    }
    pool.parallel_for(tasks, [&](std::int64_t task, int) {
      std::size_t i = n - 1;
      while (first_task[i] > task) --i;
      const Linear& l = *layers[at + i];
      const std::int64_t first = (task - first_task[i]) * rows[i];
      l.run_rows(x, m, ys[at + i], first, std::min(rows[i], l.w_.out - first));
    });
  }
}

}  // namespace mxmoe::dense
