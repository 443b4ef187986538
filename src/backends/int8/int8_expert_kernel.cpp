#include "backends/int8/int8_expert_kernel.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/common/expert_tasks.hpp"
#include "backends/common/group16_pack.hpp"
#include "backends/int8/int16_kernels.hpp"
#include "backends/int8/int8_kernels.hpp"
#include "base/thread_pool.hpp"

namespace mxmoe::int8_backend {
namespace {

namespace k = int8_kernels;

constexpr std::size_t kAlign = 64;
constexpr int kTileRows = 32;  // rows of W2 / intermediate units of W1 per task
constexpr int kChunk = 16;     // slots per inner chunk (one AMX A tile)

std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// The vpdpbusd / TDPBSSD arrangement of int8_kernels.hpp: byte 64h + 4i + j holds row i's
// element 8h+j (low nibble) and 8h+4+j (high nibble).
void arrange_int8(const std::uint8_t (&codes)[group16::kRows][32], std::uint8_t* dst) {
  for (int i = 0; i < group16::kRows; ++i)
    for (int h = 0; h < 4; ++h)
      for (int j = 0; j < 4; ++j)
        dst[64 * h + 4 * i + j] =
            static_cast<std::uint8_t>(codes[i][8 * h + j] | (codes[i][8 * h + 4 + j] << 4));
}

// The per-ISA functions of one kernel choice; Q is the quantized activation type.
template <class Q>
struct IsaOps {
  void (*quantize)(const float*, std::int64_t, Q*, float*, std::int32_t*) noexcept;
  void (*gemm16)(const std::uint8_t*, int, const k::QuantRowsOf<Q>&, int, float*,
                 std::int64_t) noexcept;
  void (*glu_quantize)(const float*, int, const float*, const float*, const k::GluParams&, Q*,
                       float*, std::int32_t*, std::int64_t, std::int64_t) noexcept;
  bool use_amx;
};

// Only the kernels of the target's architecture are compiled (CMakeLists.txt); the backends
// of the other architecture never reach this (their create is null there).
IsaOps<std::int8_t> isa_ops(Int8Kernels kernels) {
#if MXMOE_X86_KERNELS
  switch (kernels) {
    case Int8Kernels::avx2:
      return {&k::quantize_int8_avx2, &k::gemm16_avx2, &k::glu_quantize_avx2, false};
    case Int8Kernels::avx_vnni:
      return {&k::quantize_int8_avx2, &k::gemm16_avx_vnni, &k::glu_quantize_avx2, false};
    case Int8Kernels::amx_int8:
      return {&k::quantize_int8_avx512, &k::gemm16_vnni, &k::glu_quantize_avx512, true};
    case Int8Kernels::avx512_vnni:
    case Int8Kernels::neon_dotprod:
    case Int8Kernels::neon_i8mm:
    case Int8Kernels::sve:
      break;
  }
  return {&k::quantize_int8_avx512, &k::gemm16_vnni, &k::glu_quantize_avx512, false};
#elif MXMOE_AARCH64_KERNELS
  auto gemm16 = &k::gemm16_neon_dotprod;
  switch (kernels) {
    case Int8Kernels::neon_i8mm:
      gemm16 = &k::gemm16_neon_i8mm;
      break;
    case Int8Kernels::sve:
      gemm16 = &k::gemm16_sve;
      break;
    case Int8Kernels::avx512_vnni:
    case Int8Kernels::amx_int8:
    case Int8Kernels::avx2:
    case Int8Kernels::avx_vnni:
    case Int8Kernels::neon_dotprod:
      break;
  }
  return {&k::quantize_int8_neon, gemm16, &k::glu_quantize_neon, false};
#else
#error "the integer driver is built only where the target has kernels"
#endif
}

IsaOps<std::int16_t> isa_ops(Int16Kernels kernels) {
  namespace k16 = int16_kernels;
  (void)kernels;
#if MXMOE_X86_KERNELS
  return {&k16::quantize_int16_avx2, &k16::gemm16_int16_avx2, &k16::glu_quantize_int16_avx2, false};
#else
  return {&k16::quantize_int16_neon, &k16::gemm16_int16_neon, &k16::glu_quantize_int16_neon, false};
#endif
}

// Byte offsets of the workspace regions for `positions` slots and `threads` threads.
struct Layout {
  std::size_t xq, xd, xc, aq, ad, ac, thread_base, per_thread, total;
  std::size_t t_h, t_btiles, t_wscale, t_c;  // offsets inside one thread's region
};

// The driver of both integer classes; Q = std::int8_t (with the AMX path) or std::int16_t.
template <class Q>
class QuantExpertKernel final : public ExpertKernel {
  // AMX exists on x86-64 only; elsewhere its branches are not compiled (nor its kernels).
  static constexpr bool kAmxCapable = std::is_same_v<Q, std::int8_t> && MXMOE_X86_KERNELS;

 public:
  QuantExpertKernel(const LayerSpec& spec, const LayerWeights& w, IsaOps<Q> ops)
      : hidden_(spec.hidden),
        inter_(spec.intermediate),
        ops_(ops),
        packed_(group16::pack_experts(spec, w, &arrange_int8, "int8 expert kernel")) {
    static_assert(group16::kBlockBytes == k::kGroupBlockBytes &&
                  group16::kNibbleBytes == k::kGroupNibbleBytes);
    glu_.fn = spec.activation == ActivationFn::swiglu_oai ? k::kGluSwigluOai
              : spec.activation == ActivationFn::silu_glu ? k::kGluSilu
                                                          : k::kGluSiluClamp;
    glu_.alpha = spec.activation_params.alpha;
    glu_.limit = spec.activation_params.limit;
  }

  std::size_t packed_bytes() const noexcept override { return packed_.bytes(); }

  std::size_t workspace_bytes(std::int64_t /*rows*/, std::int64_t slots,
                              int threads) const noexcept override {
    return layout(slots, threads).total;
  }

  void run(const ExpertForward& f) const noexcept override;

 private:
  std::int64_t blocks_h() const { return hidden_ / 32; }
  std::int64_t blocks_i() const { return inter_ / 32; }

  Layout layout(std::int64_t positions, int threads) const noexcept {
    const auto p = static_cast<std::size_t>(std::max<std::int64_t>(positions, 0));
    const auto h = static_cast<std::size_t>(hidden_), i = static_cast<std::size_t>(inter_);
    const auto nbh = static_cast<std::size_t>(blocks_h()),
               nbi = static_cast<std::size_t>(blocks_i());
    Layout l{};
    std::size_t at = 0;
    // The AMX path reads whole 16-row A tiles: an expert's last partial chunk reads up to 15
    // rows past its slots (other experts' rows, or this padding); those results are dropped.
    const std::size_t rows = p + (ops_.use_amx ? kChunk - 1 : 0);
    l.xq = at, at += align_up(rows * h * sizeof(Q));
    l.xd = at, at += align_up(rows * nbh * sizeof(float));
    l.xc = at, at += align_up(p * nbh * sizeof(std::int32_t));
    l.aq = at, at += align_up(rows * i * sizeof(Q));
    l.ad = at, at += align_up(rows * nbi * sizeof(float));
    l.ac = at, at += align_up(p * nbi * sizeof(std::int32_t));
    l.thread_base = at;
    std::size_t t = 0;
    l.t_h = t, t += align_up(kChunk * 64 * sizeof(float));
    if (ops_.use_amx) {
      const std::size_t nb = std::max(nbh, nbi);
      l.t_btiles = t, t += align_up(4 * nb * k::kAmxBTileBytes);
      l.t_wscale = t, t += align_up(4 * nb * 16 * sizeof(float));
      l.t_c = t, t += align_up(k::kAmxCScratchInts * sizeof(std::int32_t));
    }
    l.per_thread = t;
    l.total = at + t * static_cast<std::size_t>(std::max(threads, 1));
    return l;
  }

  int hidden_, inter_;
  IsaOps<Q> ops_;
  group16::PackedExperts packed_;
  k::GluParams glu_;
};

template <class Q>
void QuantExpertKernel<Q>::run(const ExpertForward& f) const noexcept {
  const ExpertBatch& batch = f.batch;
  if (batch.slots <= 0 || batch.num_experts <= 0) return;
  const std::int32_t* offsets = batch.expert_offsets;
  const std::int64_t positions = offsets[batch.num_experts];
  if (positions <= 0) return;
  const Layout l = layout(batch.slots, f.pool->size());
  std::byte* ws = f.workspace;
  auto* xq = reinterpret_cast<Q*>(ws + l.xq);
  auto* xd = reinterpret_cast<float*>(ws + l.xd);
  auto* xc = reinterpret_cast<std::int32_t*>(ws + l.xc);
  auto* aq = reinterpret_cast<Q*>(ws + l.aq);
  auto* ad = reinterpret_cast<float*>(ws + l.ad);
  auto* ac = reinterpret_cast<std::int32_t*>(ws + l.ac);
  const std::int64_t h = hidden_, inter = inter_, nbh = blocks_h(), nbi = blocks_i();
  const std::int64_t local_experts = batch.num_experts;

  // The AMX tail rows past the last slot (see layout()) are read but their results dropped;
  // zero them so stale workspace bytes (NaN or subnormal scales) cannot slow the tiles down.
  if (ops_.use_amx) {
    const auto pad = static_cast<std::size_t>(kChunk - 1);
    std::memset(xq + positions * h, 0, pad * static_cast<std::size_t>(h) * sizeof(Q));
    std::memset(xd + positions * nbh, 0, pad * static_cast<std::size_t>(nbh) * sizeof(float));
    std::memset(aq + positions * inter, 0, pad * static_cast<std::size_t>(inter) * sizeof(Q));
    std::memset(ad + positions * nbi, 0, pad * static_cast<std::size_t>(nbi) * sizeof(float));
  }

  // Phase 1: quantize the input of every local slot (positions in expert order), so an
  // expert's rows are contiguous for the tile loads. A token's bits are the same in each copy.
  constexpr std::int64_t kQuantChunk = 8;
  f.pool->parallel_for((positions + kQuantChunk - 1) / kQuantChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(positions, (task + 1) * kQuantChunk);
    for (std::int64_t p = task * kQuantChunk; p < end; ++p) {
      const std::int64_t row = batch.slot_rows[batch.order[p]];
      ops_.quantize(f.x + row * h, h, xq + p * h, xd + p * nbh, xc + p * nbh);
    }
  });

  auto thread_region = [&](int thread) {
    return ws + l.thread_base + l.per_thread * static_cast<std::size_t>(thread);
  };

  // Runs `groups` consecutive packed groups on the expert's slots in chunks of kChunk and
  // hands each chunk's accumulators (rows of 16*groups floats) to `consume`. With AMX (at least
  // one full chunk) every chunk, the partial last one included, goes through the tiles; an
  // expert with fewer slots (decode) streams its weights once through VNNI.
  auto gemm_tile = [&](int thread, const std::uint8_t* group0, std::size_t group_bytes, int groups,
                       int blocks, const k::QuantRowsOf<Q>& x, std::int64_t count, auto&& consume) {
    std::byte* region = thread_region(thread);
    auto* hbuf = reinterpret_cast<float*>(region + l.t_h);
    const bool amx = ops_.use_amx && count >= kChunk;
    std::int8_t* btiles = nullptr;
    float* wscale = nullptr;
    std::int32_t* cbuf = nullptr;
    if constexpr (kAmxCapable) {
      if (amx) {
        btiles = reinterpret_cast<std::int8_t*>(region + l.t_btiles);
        wscale = reinterpret_cast<float*>(region + l.t_wscale);
        cbuf = reinterpret_cast<std::int32_t*>(region + l.t_c);
        k::amx_int8_tile_config();
        for (int g = 0; g < groups; ++g) {
          k::amx_decode_group(group0 + static_cast<std::size_t>(g) * group_bytes, blocks,
                              btiles + static_cast<std::size_t>(g * blocks) * k::kAmxBTileBytes,
                              wscale + static_cast<std::size_t>(g * blocks) * 16);
        }
      }
    }
    const std::int64_t stride = 16 * groups;
    for (std::int64_t c0 = 0; c0 < count; c0 += kChunk) {
      const int m = static_cast<int>(std::min<std::int64_t>(kChunk, count - c0));
      const k::QuantRowsOf<Q> xs{x.q + c0 * x.q_stride, x.d + c0 * x.s_stride,
                                 x.corr + c0 * x.s_stride, x.q_stride, x.s_stride};
      for (int g = 0; g < groups; ++g) {
        if constexpr (kAmxCapable) {
          if (amx) {
            k::gemm16_amx(btiles + static_cast<std::size_t>(g * blocks) * k::kAmxBTileBytes,
                          wscale + static_cast<std::size_t>(g * blocks) * 16, blocks, xs, m,
                          hbuf + 16 * g, stride, cbuf);
            continue;
          }
        }
        ops_.gemm16(group0 + static_cast<std::size_t>(g) * group_bytes, blocks, xs, m,
                    hbuf + 16 * g, stride);
      }
      consume(c0, m, hbuf);
    }
    if constexpr (kAmxCapable) {
      if (amx) k::amx_int8_tile_release();
    }
  };

  // Phase 2: GEMM1 for 32 intermediate units (4 groups: gate, up, gate, up), GLU, requantize.
  const ExpertTasks tasks1(local_experts, inter / kTileRows, positions, kChunk);
  f.pool->parallel_for(tasks1.count(), [&](std::int64_t task, int thread) {
    const auto [local, jt] = tasks1(task);
    const std::int64_t e = local;
    const std::int64_t p0 = offsets[e], count = offsets[e + 1] - offsets[e];
    if (count == 0) return;
    const std::uint8_t* group0 = packed_.w1_group(e, 4 * jt);
    const k::QuantRowsOf<Q> x{xq + p0 * h, xd + p0 * nbh, xc + p0 * nbh, h, nbh};
    const float* gate_bias = packed_.gate_bias.data() + e * inter + kTileRows * jt;
    const float* up_bias = packed_.up_bias.data() + e * inter + kTileRows * jt;
    gemm_tile(thread, group0, packed_.w1_group_bytes(), 4, static_cast<int>(nbh), x, count,
              // Init-captures: clang before 16 cannot capture structured bindings.
              [&, row_tile = jt](std::int64_t c0, int m, const float* acc) {
                const std::int64_t p = p0 + c0;
                ops_.glu_quantize(acc, m, gate_bias, up_bias, glu_,
                                  aq + p * inter + kTileRows * row_tile, ad + p * nbi + row_tile,
                                  ac + p * nbi + row_tile, inter, nbi);
              });
  });

  // Phase 3: GEMM2 for 32 output rows (2 groups), + b2, written to the slots' outputs.
  const ExpertTasks tasks2(local_experts, h / kTileRows, positions, kChunk);
  f.pool->parallel_for(tasks2.count(), [&](std::int64_t task, int thread) {
    const auto [local, ot] = tasks2(task);
    const std::int64_t e = local;
    const std::int64_t p0 = offsets[e], count = offsets[e + 1] - offsets[e];
    if (count == 0) return;
    const std::uint8_t* group0 = packed_.w2_group(e, 2 * ot);
    const k::QuantRowsOf<Q> a{aq + p0 * inter, ad + p0 * nbi, ac + p0 * nbi, inter, nbi};
    const float* bias = packed_.b2.data() + e * h + kTileRows * ot;
    gemm_tile(thread, group0, packed_.w2_group_bytes(), 2, static_cast<int>(nbi), a, count,
              [&, out_tile = ot](std::int64_t c0, int m, const float* acc) {
                for (int r = 0; r < m; ++r) {
                  const std::int64_t slot = batch.order[offsets[e] + c0 + r];
                  float* dst = f.slot_out + slot * h + kTileRows * out_tile;
                  for (int o = 0; o < kTileRows; ++o) dst[o] = acc[r * kTileRows + o] + bias[o];
                }
              });
  });
}

}  // namespace

std::unique_ptr<ExpertKernel> make_int8_expert_kernel(const LayerSpec& spec,
                                                      const LayerWeights& weights,
                                                      Int8Kernels kernels) {
  return std::make_unique<QuantExpertKernel<std::int8_t>>(spec, weights, isa_ops(kernels));
}

std::unique_ptr<ExpertKernel> make_int16_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       Int16Kernels kernels) {
  return std::make_unique<QuantExpertKernel<std::int16_t>>(spec, weights, isa_ops(kernels));
}

}  // namespace mxmoe::int8_backend
