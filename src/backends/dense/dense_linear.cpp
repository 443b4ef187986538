// Dense linear layers (dense_linear.hpp): the weights' checks, the candidates and their
// verdicts, the compact packing, and the split of the output rows over the pool.
#include "backends/dense/dense_linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "backends/kernel_isa.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::dense {

namespace {

// The largest dimension accepted: far above any model (vocab 1M, hidden 64k).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr std::string_view kFp32Class = "dense_fp32_lanes16";
constexpr std::string_view kInt8Class = "dense_int8_rows16";

// One kernel: its name, class, mode, the kernel sets it calls (none: portable) and its entry.
struct Candidate {
  const char* name;
  std::string_view numerics_class;
  DenseMode mode;
  std::optional<KernelIsa> set;  // none: portable C++
  LinearF32Fn f32;
  LinearInt8Fn int8;
  CompactLayout layout = CompactLayout::rows16;  // compact kernels: how it wants the codes
};

// Best first. A kernel of another architecture's set has no entry here (not_compiled).
#if MXMOE_X86_KERNELS
constexpr LinearF32Fn kAvx512Fp32 = &linear_fp32_avx512, kAvx2Fp32 = &linear_fp32_avx2;
constexpr LinearInt8Fn kVnniInt8 = &linear_int8_avx512_vnni, kAvx2Int8 = &linear_int8_avx2;
#else
constexpr LinearF32Fn kAvx512Fp32 = nullptr, kAvx2Fp32 = nullptr;
constexpr LinearInt8Fn kVnniInt8 = nullptr, kAvx2Int8 = nullptr;
#endif
#if MXMOE_AARCH64_KERNELS
constexpr LinearF32Fn kNeonFp32 = &linear_fp32_neon;
constexpr LinearInt8Fn kDotprodInt8 = &linear_int8_neon_dotprod;
#else
constexpr LinearF32Fn kNeonFp32 = nullptr;
constexpr LinearInt8Fn kDotprodInt8 = nullptr;
#endif

constexpr std::array<Candidate, 8> kCandidates = {{
    {"avx512_fp32", kFp32Class, DenseMode::as_published, KernelIsa::avx512, kAvx512Fp32, nullptr},
    {"avx2_fp32", kFp32Class, DenseMode::as_published, KernelIsa::avx2, kAvx2Fp32, nullptr},
    {"neon_fp32", kFp32Class, DenseMode::as_published, KernelIsa::neon, kNeonFp32, nullptr},
    {"portable_fp32", kFp32Class, DenseMode::as_published, {}, &linear_fp32_portable, nullptr},
    {"avx512_vnni_int8", kInt8Class, DenseMode::compact_int8, KernelIsa::avx512_vnni, nullptr,
     kVnniInt8, CompactLayout::rows16_biased},
    {"avx2_int8", kInt8Class, DenseMode::compact_int8, KernelIsa::avx2, nullptr, kAvx2Int8},
    {"neon_dotprod_int8", kInt8Class, DenseMode::compact_int8, KernelIsa::neon_dotprod, nullptr,
     kDotprodInt8},
    {"portable_int8", kInt8Class, DenseMode::compact_int8, {}, nullptr, &linear_int8_portable},
}};

bool listed(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every reason CANDIDATE cannot run layer W on HARDWARE.
std::vector<Rejection> check(const Candidate& c, const LinearWeights& w, const Hardware& hardware) {
  std::vector<Rejection> out;
  if (c.mode == DenseMode::compact_int8 && w.in > kCompactMaxIn)
    out.push_back({ReasonCode::shape_alignment,
                   fmt::format("compact kernels quantize a token tile on the stack: the input "
                               "size must be at most {}",
                               kCompactMaxIn),
                   fmt::format("in <= {}", kCompactMaxIn), fmt::format("in = {}", w.in),
                   "use mode as_published for this layer"});
  if (!c.set) return out;  // portable C++ runs anywhere
  for (Rejection& r : isa_rejections(*c.set, hardware)) out.push_back(std::move(r));
  return out;
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

std::string_view to_string(DenseMode mode) noexcept {
  return mode == DenseMode::compact_int8 ? "compact_int8" : "as_published";
}

LinearSelection judge_kernels(const LinearWeights& w, const Hardware& hardware, DenseMode mode) {
  LinearSelection s;
  s.mode = mode;
  for (const Candidate& c : kCandidates) {
    if (c.mode != mode) continue;
    s.candidates.push_back({c.name, std::string(c.numerics_class), check(c, w, hardware)});
    if (s.chosen.empty() && s.candidates.back().accepted()) s.chosen = c.name;
  }
  return s;
}

std::string describe(const LinearSelection& s, std::string_view layer_name) {
  std::string text = fmt::format("dense '{}' ({}): {}\n", layer_name, to_string(s.mode),
                                 s.chosen.empty() ? "no kernel" : s.chosen);
  return text + describe_verdicts(s.candidates, s.chosen);
}

std::string describe_verdicts(const std::vector<KernelVerdict>& candidates, std::string_view chosen) {
  std::string text;
  for (const KernelVerdict& v : candidates) {
    text += fmt::format("  {} [{}]: {}\n", v.kernel, v.numerics_class,
                        v.accepted() ? (v.kernel == chosen ? "chosen" : "accepted") : "rejected");
    for (const Rejection& r : v.reasons)
      text += fmt::format("    {}: {} (needs {}, has {}){}\n", to_string(r.code), r.detail,
                          r.required, r.actual, r.remedy.empty() ? "" : "; " + r.remedy);
  }
  return text;
}

Linear::Linear(const LinearWeights& w, const Hardware& hardware) : Linear(w, hardware, {}) {}

Linear::Linear(const LinearWeights& w, const Hardware& hardware, const LinearOptions& options)
    : w_(w) {
  check_weights(w);
  selection_ = judge_kernels(w, hardware, options.mode);
  if (selection_.chosen.empty())
    throw std::invalid_argument("dense weight '" + w.name + "': no kernel runs it here\n" +
                                describe(selection_, w.name));
  CompactLayout layout = CompactLayout::rows16;
  for (const Candidate& c : kCandidates)
    if (c.name == selection_.chosen) {
      kernel_name_ = c.name;
      f32_ = c.f32;
      int8_ = c.int8;
      layout = c.layout;
    }
  if (w.bias != nullptr) {
    bias_.resize(static_cast<std::size_t>(w.out));
    for (std::int64_t o = 0; o < w.out; ++o)
      bias_[static_cast<std::size_t>(o)] = element_at(w.bias, w.bias_element, o);
  }
  if (options.mode != DenseMode::compact_int8) return;

  // Quantize each row's 32-blocks (the last one short when in % 32 != 0) into its group.
  const std::int64_t blocks = (w.in + kBlock - 1) / kBlock;
  const std::int64_t groups = (w.out + kCompactGroupRows - 1) / kCompactGroupRows;
  const std::uint8_t bias = layout == CompactLayout::rows16_biased ? 0x80 : 0x00;
  packed_.assign(static_cast<std::size_t>(groups * blocks * kCompactGroupBlockBytes), bias);
  auto pack_rows = [&](std::int64_t r0, std::int64_t r1) {
    float v[kBlock];
    std::int8_t codes[kBlock];
    for (std::int64_t o = r0; o < r1; ++o) {
      const std::int64_t i = o % kCompactGroupRows;
      std::uint8_t* group = packed_.data() + (o / kCompactGroupRows) * blocks * kCompactGroupBlockBytes;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const int count = static_cast<int>(std::min<std::int64_t>(kBlock, w.in - b * kBlock));
        for (int k = 0; k < count; ++k)
          v[k] = element_at(w.data, w.element, o * w.in + b * kBlock + k);
        const float scale = quantize_block32_portable(v, count, codes);
        std::uint8_t* gb = group + b * kCompactGroupBlockBytes;
        for (int k = 0; k < kBlock; ++k)
          gb[64 * (k / 4) + 4 * i + k % 4] = static_cast<std::uint8_t>(codes[k]) ^ bias;
        std::memcpy(gb + kCompactGroupCodeBytes + 4 * i, &scale, sizeof scale);
      }
    }
  };
  constexpr std::int64_t kPackRows = 4 * kCompactGroupRows;  // whole groups: no shared bytes
  if (options.pack_pool == nullptr) {
    pack_rows(0, w.out);
  } else {
    options.pack_pool->parallel_for(
        (w.out + kPackRows - 1) / kPackRows, [&](std::int64_t task, int) {
          pack_rows(task * kPackRows, std::min(w.out, (task + 1) * kPackRows));
        });
  }
  w_.data = nullptr;  // never read again
  w_.bias = nullptr;
}

std::size_t Linear::weight_bytes() const noexcept {
  if (selection_.mode == DenseMode::compact_int8)
    return packed_.size();
  return static_cast<std::size_t>(w_.out * w_.in) * (w_.element == ElementType::bf16 ? 2 : 4);
}

std::int64_t Linear::rows_per_task(std::int64_t m, int threads) const noexcept {
  // Prefill (fp32, m > 8): 64 rows, whose weights stay in L2 while the token tiles sweep them.
  if (f32_ != nullptr && m > 8) return 64;
  // Otherwise about 4 tasks a thread, in 16-row steps, at most 256 rows (a compact task
  // quantizes its tokens once: the more rows, the less that costs).
  const std::int64_t target = (w_.out + 4 * threads - 1) / (4 * threads);
  return std::clamp<std::int64_t>((target + 15) / 16 * 16, 16, 256);
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept {
  if (m <= 0) return;
  const std::int64_t rows = rows_per_task(m, pool.size());
  const std::int64_t tasks = (w_.out + rows - 1) / rows;
  const float* bias = bias_.empty() ? nullptr : bias_.data();
  if (f32_ != nullptr) {
    const LinearF32Call call{w_.data, w_.element == ElementType::bf16, w_.in, x, m, y, w_.out,
                             bias};
    pool.parallel_for(tasks, [&](std::int64_t task, int) {
      f32_(call, task * rows, std::min(rows, w_.out - task * rows));
    });
    return;
  }
  const LinearInt8Call call{{packed_.data(), (w_.in + kBlock - 1) / kBlock, w_.out},
                            w_.in,
                            x,
                            m,
                            y,
                            w_.out,
                            bias};
  pool.parallel_for(tasks, [&](std::int64_t task, int) {
    int8_(call, task * rows, std::min(rows, w_.out - task * rows));
  });
}

}  // namespace mxmoe::dense
