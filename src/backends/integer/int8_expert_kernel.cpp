#include "backends/integer/int8_expert_kernel.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/common/expert_driver.hpp"
#include "backends/common/group16_pack.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "base/thread_pool.hpp"

namespace mxmoe::int8_backend {
namespace {

namespace k = int8_kernels;

constexpr int kTileRows = 32;  // rows of W2 / intermediate units of W1 per task
constexpr int kChunk = 16;     // slots per inner chunk (one AMX A tile)

// The vpdpbusd / TDPBSSD arrangement of int8_kernels.hpp: byte 64h + 4i + j holds row i's
// element 8h+j (low nibble) and 8h+4+j (high nibble).
void arrange_int8(const std::uint8_t (&codes)[group16::kRows][32], std::uint8_t* dst) {
  for (int i = 0; i < group16::kRows; ++i)
    for (int h = 0; h < 4; ++h)
      for (int j = 0; j < 4; ++j)
        dst[64 * h + 4 * i + j] =
            static_cast<std::uint8_t>(codes[i][8 * h + j] | (codes[i][8 * h + 4 + j] << 4));
}

// Byte offsets of the workspace regions for `positions` slots, then the per-thread regions.
struct Layout {
  std::size_t xq, xd, xc, aq, ad, ac;
  driver::ThreadRegions threads;
  std::size_t t_h, t_btiles, t_wscale, t_c;  // offsets inside one thread's region
};

// The driver of both integer classes; Q = std::int8_t (with the AMX path) or std::int16_t.
template <class Q>
class QuantExpertKernel final : public ExpertKernel {
 public:
  QuantExpertKernel(const LayerSpec& spec, const LayerWeights& w, const QuantOps<Q>& ops)
      : hidden_(spec.hidden),
        inter_(spec.intermediate),
        ops_(ops),
        amx_(ops.amx),
        packed_(group16::pack_experts(spec, w, &arrange_int8, "int8 expert kernel")),
        glu_(driver::glu_params(spec)) {
    static_assert(std::is_same_v<Q, std::int8_t> || std::is_same_v<Q, std::int16_t>);
    if constexpr (!std::is_same_v<Q, std::int8_t>) amx_ = nullptr;  // tiles take int8 only
  }

  std::size_t packed_bytes() const noexcept override { return packed_.bytes(); }

  std::size_t workspace_bytes(std::int64_t /*rows*/, std::int64_t slots,
                              int threads) const noexcept override {
    return layout(slots).threads.total(threads);
  }

  void run(const ExpertForward& f) const noexcept override;

 private:
  std::int64_t blocks_h() const { return hidden_ / 32; }
  std::int64_t blocks_i() const { return inter_ / 32; }

  Layout layout(std::int64_t positions) const noexcept {
    const auto p = static_cast<std::size_t>(std::max<std::int64_t>(positions, 0));
    const auto h = static_cast<std::size_t>(hidden_), i = static_cast<std::size_t>(inter_);
    const auto nbh = static_cast<std::size_t>(blocks_h()),
               nbi = static_cast<std::size_t>(blocks_i());
    Layout l{};
    driver::Carve shared;
    // The AMX path reads whole 16-row A tiles: an expert's last partial chunk reads up to 15
    // rows past its slots (other experts' rows, or this padding); those results are dropped.
    const std::size_t rows = p + (amx_ != nullptr ? kChunk - 1 : 0);
    l.xq = shared.take(rows * h * sizeof(Q));
    l.xd = shared.take(rows * nbh * sizeof(float));
    l.xc = shared.take(p * nbh * sizeof(std::int32_t));
    l.aq = shared.take(rows * i * sizeof(Q));
    l.ad = shared.take(rows * nbi * sizeof(float));
    l.ac = shared.take(p * nbi * sizeof(std::int32_t));
    driver::Carve thread;
    l.t_h = thread.take(kChunk * 64 * sizeof(float));
    if (amx_ != nullptr) {
      const std::size_t nb = std::max(nbh, nbi);
      l.t_btiles = thread.take(4 * nb * k::kAmxBTileBytes);
      l.t_wscale = thread.take(4 * nb * 16 * sizeof(float));
      l.t_c = thread.take(k::kAmxCScratchInts * sizeof(std::int32_t));
    }
    l.threads = {.base = shared.end, .per_thread = thread.end};
    return l;
  }

  int hidden_, inter_;
  QuantOps<Q> ops_;
  const AmxInt8Ops* amx_;  // null: no tiles (the int16 class never has them)
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
  const Layout l = layout(batch.slots);
  std::byte* ws = f.workspace;
  auto* xq = reinterpret_cast<Q*>(ws + l.xq);
  auto* xd = reinterpret_cast<float*>(ws + l.xd);
  auto* xc = reinterpret_cast<std::int32_t*>(ws + l.xc);
  auto* aq = reinterpret_cast<Q*>(ws + l.aq);
  auto* ad = reinterpret_cast<float*>(ws + l.ad);
  auto* ac = reinterpret_cast<std::int32_t*>(ws + l.ac);
  const std::int64_t h = hidden_, inter = inter_, nbh = blocks_h(), nbi = blocks_i();

  // The AMX tail rows past the last slot (see layout()) are read but their results dropped;
  // zero them so stale workspace bytes (NaN or subnormal scales) cannot slow the tiles down.
  if (amx_ != nullptr) {
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

  // Runs `groups` consecutive packed groups on the expert's slots in chunks of kChunk and
  // hands each chunk's accumulators (rows of 16*groups floats) to `consume`. With AMX (at least
  // one full chunk) every chunk, the partial last one included, goes through the tiles; an
  // expert with fewer slots (decode) streams its weights once through gemm16.
  auto gemm_tile = [&](int thread, const std::uint8_t* group0, std::size_t group_bytes, int groups,
                       int blocks, const k::QuantRowsOf<Q>& x, std::int64_t count, auto&& consume) {
    std::byte* region = l.threads.of(ws, thread);
    auto* hbuf = reinterpret_cast<float*>(region + l.t_h);
    const AmxInt8Ops* amx = count >= kChunk ? amx_ : nullptr;
    auto* btiles = reinterpret_cast<std::int8_t*>(region + l.t_btiles);
    auto* wscale = reinterpret_cast<float*>(region + l.t_wscale);
    if (amx != nullptr) {
      amx->tile_config();
      for (int g = 0; g < groups; ++g) {
        amx->decode_group(group0 + static_cast<std::size_t>(g) * group_bytes, blocks,
                          btiles + static_cast<std::size_t>(g * blocks) * k::kAmxBTileBytes,
                          wscale + static_cast<std::size_t>(g * blocks) * 16);
      }
    }
    const std::int64_t stride = 16 * groups;
    for (std::int64_t c0 = 0; c0 < count; c0 += kChunk) {
      const int m = static_cast<int>(std::min<std::int64_t>(kChunk, count - c0));
      const k::QuantRowsOf<Q> xs{x.q + c0 * x.q_stride, x.d + c0 * x.s_stride,
                                 x.corr + c0 * x.s_stride, x.q_stride, x.s_stride};
      for (int g = 0; g < groups; ++g) {
        if constexpr (std::is_same_v<Q, std::int8_t>) {
          if (amx != nullptr) {
            amx->gemm16(btiles + static_cast<std::size_t>(g * blocks) * k::kAmxBTileBytes,
                        wscale + static_cast<std::size_t>(g * blocks) * 16, blocks, xs, m,
                        hbuf + 16 * g, stride,
                        reinterpret_cast<std::int32_t*>(region + l.t_c));
            continue;
          }
        }
        ops_.gemm16(group0 + static_cast<std::size_t>(g) * group_bytes, blocks, xs, m,
                    hbuf + 16 * g, stride);
      }
      consume(c0, m, hbuf);
    }
    if (amx != nullptr) amx->tile_release();
  };

  // Phase 2: GEMM1 for 32 intermediate units (4 groups: gate, up, gate, up), GLU, requantize.
  driver::for_each_expert_tile(f, inter / kTileRows, kChunk, [&](std::int64_t e, std::int64_t jt,
                                                                std::int64_t p0, std::int64_t count,
                                                                int thread) {
    const std::uint8_t* group0 = packed_.w1_group(e, 4 * jt);
    const k::QuantRowsOf<Q> x{xq + p0 * h, xd + p0 * nbh, xc + p0 * nbh, h, nbh};
    const float* gate_bias = packed_.gate_bias.data() + e * inter + kTileRows * jt;
    const float* up_bias = packed_.up_bias.data() + e * inter + kTileRows * jt;
    gemm_tile(thread, group0, packed_.w1_group_bytes(), 4, static_cast<int>(nbh), x, count,
              [&](std::int64_t c0, int m, const float* acc) {
                const std::int64_t p = p0 + c0;
                ops_.glu_quantize(acc, m, gate_bias, up_bias, glu_,
                                  aq + p * inter + kTileRows * jt, ad + p * nbi + jt,
                                  ac + p * nbi + jt, inter, nbi);
              });
  });

  // Phase 3: GEMM2 for 32 output rows (2 groups), + b2, written to the slots' outputs.
  driver::for_each_expert_tile(f, h / kTileRows, kChunk, [&](std::int64_t e, std::int64_t ot,
                                                            std::int64_t p0, std::int64_t count,
                                                            int thread) {
    const std::uint8_t* group0 = packed_.w2_group(e, 2 * ot);
    const k::QuantRowsOf<Q> a{aq + p0 * inter, ad + p0 * nbi, ac + p0 * nbi, inter, nbi};
    const float* bias = packed_.b2.data() + e * h + kTileRows * ot;
    gemm_tile(thread, group0, packed_.w2_group_bytes(), 2, static_cast<int>(nbi), a, count,
              [&](std::int64_t c0, int m, const float* acc) {
                driver::store_plus_bias(f, p0 + c0, m, acc, kTileRows, 1, kTileRows, bias, h,
                                        kTileRows * ot);
              });
  });
}

}  // namespace

std::unique_ptr<ExpertKernel> make_quant_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       const Int8Ops& ops) {
  return std::make_unique<QuantExpertKernel<std::int8_t>>(spec, weights, ops);
}

std::unique_ptr<ExpertKernel> make_quant_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       const Int16Ops& ops) {
  return std::make_unique<QuantExpertKernel<std::int16_t>>(spec, weights, ops);
}

}  // namespace mxmoe::int8_backend
