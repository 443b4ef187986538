#include "backends/amx_bf16/bf16_expert_kernel.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/amx_bf16/bf16_amx_kernels.hpp"
#include "backends/common/expert_driver.hpp"
#include "backends/common/group16_pack.hpp"
#include "base/thread_pool.hpp"
#include "format/activation_rounding.hpp"
#include "model/activation.hpp"

namespace mxmoe::amx_bf16_backend {
namespace {

namespace k = bf16_amx;

constexpr int kTaskRows = 32;              // intermediate units (GEMM1) or outputs (GEMM2)
constexpr int kStep = k::kTokensPerStep;   // slots per gemm_pair call
constexpr std::int64_t kPadRows = 16 - 1;  // A tiles read whole 16-row tiles
constexpr auto kATile = static_cast<std::int64_t>(k::kATileElems);  // elements of one A tile

// The TDPBF16PS B-tile arrangement of bf16_amx_kernels.hpp: nibble r of little-endian word
// j of 64-byte chunk q is element 8q + 2r + j%2 of output j/2.
void arrange_bf16(const std::uint8_t (&codes)[group16::kRows][32], std::uint8_t* dst) {
  for (int q = 0; q < 4; ++q)
    for (int j = 0; j < 32; ++j) {
      const int n = j / 2, k = 8 * q + j % 2;
      dst[64 * q + 2 * j] = static_cast<std::uint8_t>(codes[n][k] | (codes[n][k + 2] << 4));
      dst[64 * q + 2 * j + 1] = static_cast<std::uint8_t>(codes[n][k + 4] | (codes[n][k + 6] << 4));
    }
}

// One flag per group: every scale of the group can be folded into bf16 exactly.
std::vector<std::uint8_t> foldable_groups(const std::uint8_t* groups, std::size_t count,
                                          std::size_t group_bytes) {
  std::vector<std::uint8_t> fold(count, 1);
  for (std::size_t g = 0; g < count; ++g) {
    const std::uint8_t* base = groups + g * group_bytes;
    for (std::size_t at = group16::kNibbleBytes; at < group_bytes; at += group16::kBlockBytes)
      for (std::size_t i = 0; i < group16::kRows; ++i)
        if (!k::bf16_scale_foldable(base[at + i])) fold[g] = 0;
  }
  return fold;
}

struct Layout {
  std::size_t tile_start, xb, ab;
  driver::ThreadRegions threads;
  // Offsets inside one thread's region; t_row and t_round only for mxfp8 (a rounded row and
  // the rounding scratch).
  std::size_t t_btiles, t_scales, t_h, t_c, t_row, t_round;
};

// One thread's scratch: decoded B tiles and block scales of the groups of a task, GEMM
// results of one step, the kernels' C-tile scratch.
struct Scratch {
  std::uint16_t* btiles;
  float* scales;
  float* h;
  float* c;
};

class AmxBf16Kernel final : public ExpertKernel {
 public:
  AmxBf16Kernel(const LayerSpec& spec, const LayerWeights& w, ActivationFormat format,
                const AmxBf16Ops& ops)
      : spec_(spec),
        ops_(ops),
        mxfp8_(format == ActivationFormat::mxfp8),
        experts_(spec.num_experts),
        hidden_(spec.hidden),
        inter_(spec.intermediate),
        packed_(group16::pack_experts(spec, w, &arrange_bf16, "amx_bf16")),
        glu_(driver::glu_params(spec)) {
    if (format != ActivationFormat::bf16 && format != ActivationFormat::mxfp8)
      throw std::invalid_argument("amx_bf16 implements bf16 and mxfp8 activations only");
    w1_fold_ = foldable_groups(packed_.w1.data(), packed_.w1.size() / packed_.w1_group_bytes(),
                               packed_.w1_group_bytes());
    w2_fold_ = foldable_groups(packed_.w2.data(), packed_.w2.size() / packed_.w2_group_bytes(),
                               packed_.w2_group_bytes());
  }

  std::size_t packed_bytes() const noexcept override {
    return packed_.bytes() + w1_fold_.size() + w2_fold_.size();
  }

  std::size_t workspace_bytes(std::int64_t /*rows*/, std::int64_t slots,
                              int threads) const noexcept override {
    return layout(slots).threads.total(threads);
  }

  void run(const ExpertForward& f) const noexcept override;

 private:
  // One run()'s workspace: the activation row tiles (xb: the rounded inputs, GEMM1's; ab: the
  // GLU's outputs, GEMM2's inputs), each local expert's first row tile, each thread's region.
  struct Call {
    const ExpertForward& f;
    Layout l;
    int nbh, nbi;  // 32-element K blocks (A tiles) of a row tile of xb / ab
    std::uint16_t* xb;
    std::uint16_t* ab;
    std::int64_t x_tile_stride, a_tile_stride;  // elements from one row tile to the next
    std::int64_t* tile_start;                   // [local experts + 1]
    std::int64_t row_tiles;

    std::byte* thread_region(int thread) const noexcept {
      return l.threads.of(f.workspace, thread);
    }
    Scratch scratch(int thread) const noexcept {
      std::byte* r = thread_region(thread);
      return Scratch{reinterpret_cast<std::uint16_t*>(r + l.t_btiles),
                     reinterpret_cast<float*>(r + l.t_scales), reinterpret_cast<float*>(r + l.t_h),
                     reinterpret_cast<float*>(r + l.t_c)};
    }
  };
  // The consecutive packed groups one GEMM task runs, and their fold flags.
  struct GroupRun {
    const std::uint8_t* group0;
    std::size_t group_bytes;
    const std::uint8_t* fold;
    int groups, blocks;
  };

  Call call_of(const ExpertForward& f) const noexcept;
  void mxfp8_row_to_tiles(const Call& c, const float* x, int thread,
                          std::uint16_t* row) const noexcept;
  void round_inputs_to_tiles(const Call& c) const noexcept;
  template <class Consume>
  void gemm_groups(const Scratch& s, const GroupRun& g_run, const std::uint16_t* a,
                   std::int64_t a_stride, std::int64_t count, Consume&& consume) const noexcept;
  void glu_rows_to_mxfp8(const float* acc, int m, const float* gate_bias, const float* up_bias,
                         std::byte* round_scratch, std::uint16_t* a,
                         std::int64_t a_tile_stride) const noexcept;
  void gemm1_glu(const Call& c) const noexcept;
  void gemm2_plus_bias(const Call& c) const noexcept;

  // Activations live in row tiles of 16 slots; each expert's slots start a new row tile, so
  // `positions` slots over the experts need at most positions/16 + experts row tiles.
  Layout layout(std::int64_t positions) const noexcept {
    const auto row_tiles =
        static_cast<std::size_t>(std::max<std::int64_t>(positions, 0) / 16 + experts_ + 1);
    const auto nb = static_cast<std::size_t>(std::max(packed_.blocks_h(), packed_.blocks_i()));
    const auto tile_bytes = k::kATileElems * sizeof(std::uint16_t);
    Layout l{};
    driver::Carve shared;
    l.tile_start = shared.take(static_cast<std::size_t>(experts_ + 1) * sizeof(std::int64_t));
    l.xb = shared.take(row_tiles * static_cast<std::size_t>(packed_.blocks_h()) * tile_bytes);
    l.ab = shared.take(row_tiles * static_cast<std::size_t>(packed_.blocks_i()) * tile_bytes);
    driver::Carve thread;
    l.t_btiles = thread.take(4 * nb * k::kBTileElems * sizeof(std::uint16_t));
    l.t_scales = thread.take(4 * nb * 16 * sizeof(float));
    l.t_h = thread.take(kStep * 64 * sizeof(float));
    l.t_c = thread.take(256 * sizeof(float));
    const auto width = static_cast<std::size_t>(std::max(hidden_, 32));
    l.t_row = thread.take(mxfp8_ ? width * sizeof(std::uint16_t) : 0);
    l.t_round = thread.take(mxfp8_ ? rounding_bf16_scratch_bytes(width) : 0);
    l.threads = {.base = shared.end, .per_thread = thread.end};
    return l;
  }

  LayerSpec spec_;
  AmxBf16Ops ops_;
  bool mxfp8_;
  int experts_, hidden_, inter_;
  group16::PackedExperts packed_;
  std::vector<std::uint8_t> w1_fold_, w2_fold_;  // per group of W1 / W2, all experts
  simd::GluParams glu_;
};

// Row tile of each local expert's first slot (its slots fill whole tiles of 16) into
// tile_start[0 .. experts]; returns the row tiles of the call.
inline std::int64_t plan_row_tiles(const ExpertBatch& batch, std::int64_t* tile_start) noexcept {
  const std::int32_t* offsets = batch.expert_offsets;
  const std::int64_t local_experts = batch.num_experts;
  tile_start[0] = 0;
  for (std::int64_t i = 0; i < local_experts; ++i) {
    const std::int64_t e = i;
    tile_start[i + 1] = tile_start[i] + (offsets[e + 1] - offsets[e] + 15) / 16;
  }
  return tile_start[local_experts];
}

inline AmxBf16Kernel::Call AmxBf16Kernel::call_of(const ExpertForward& f) const noexcept {
  const Layout l = layout(f.batch.slots);
  const auto nbh = static_cast<int>(packed_.blocks_h()), nbi = static_cast<int>(packed_.blocks_i());
  const std::int64_t x_tile_stride = nbh * kATile, a_tile_stride = nbi * kATile;
  auto* tile_start = reinterpret_cast<std::int64_t*>(f.workspace + l.tile_start);
  return Call{.f = f,
              .l = l,
              .nbh = nbh,
              .nbi = nbi,
              .xb = reinterpret_cast<std::uint16_t*>(f.workspace + l.xb),
              .ab = reinterpret_cast<std::uint16_t*>(f.workspace + l.ab),
              .x_tile_stride = x_tile_stride,
              .a_tile_stride = a_tile_stride,
              .tile_start = tile_start,
              .row_tiles = plan_row_tiles(f.batch, tile_start)};
}

// mxfp8: the token's MXFP8 values as bf16 (exact) into the tiles: element 32 b + i of the
// row goes to row[b * kATileElems + i], the layout round_row_to_tiles writes.
inline void AmxBf16Kernel::mxfp8_row_to_tiles(const Call& c, const float* x, int thread,
                                              std::uint16_t* row) const noexcept {
  const std::int64_t h = hidden_;
  auto* bits = reinterpret_cast<std::uint16_t*>(c.thread_region(thread) + c.l.t_row);
  round_activations_bf16(ActivationFormat::mxfp8, {x, static_cast<std::size_t>(h)},
                         {bits, static_cast<std::size_t>(h)},
                         c.thread_region(thread) + c.l.t_round);
  for (std::int64_t b = 0; b < c.nbh; ++b)
    std::memcpy(row + b * kATile, bits + 32 * b, 32 * sizeof(std::uint16_t));
}

// Phase 1, per row tile: each slot's input rounded to bf16 (a token's bits are the same in
// each of its copies); the tile's rows past the expert's last slot are zeroed in xb and ab,
// since whole 16-row tiles are loaded and stale bytes could be NaN (their results are
// dropped, but zeros keep the tiles' arithmetic ordinary).
inline void AmxBf16Kernel::round_inputs_to_tiles(const Call& c) const noexcept {
  const ExpertForward& f = c.f;
  const ExpertBatch& batch = f.batch;
  const std::int32_t* offsets = batch.expert_offsets;
  const std::int64_t h = hidden_;
  const std::int64_t local_experts = batch.num_experts;
  f.pool->parallel_for(c.row_tiles, [&](std::int64_t tile, int thread) {
    const std::int64_t i =
        std::upper_bound(c.tile_start, c.tile_start + local_experts + 1, tile) - c.tile_start - 1;
    const std::int64_t e = i;
    const std::int64_t r0 = 16 * (tile - c.tile_start[i]);
    const std::int64_t count = offsets[e + 1] - offsets[e];
    for (std::int64_t rr = 0; rr < 16; ++rr) {
      std::uint16_t* x_row = c.xb + tile * c.x_tile_stride + rr * 32;
      if (r0 + rr < count) {
        const std::int64_t row = batch.slot_rows[batch.order[offsets[e] + r0 + rr]];
        if (mxfp8_)
          mxfp8_row_to_tiles(c, f.x + row * h, thread, x_row);
        else
          ops_.round_row_to_tiles(f.x + row * h, c.nbh, x_row);
        continue;
      }
      std::uint16_t* a_row = c.ab + tile * c.a_tile_stride + rr * 32;
      for (std::int64_t b = 0; b < c.nbh; ++b) std::memset(x_row + b * kATile, 0, 64);
      for (std::int64_t b = 0; b < c.nbi; ++b) std::memset(a_row + b * kATile, 0, 64);
    }
  });
}

// Runs `groups` (2 or 4) consecutive groups on an expert's `count` slots (row tiles from a)
// in steps of 32 slots; each step's results (rows of 16 * groups floats in s.h) go to
// consume(first slot of the step, slots in the step, results).
template <class Consume>
inline void AmxBf16Kernel::gemm_groups(const Scratch& s, const GroupRun& g_run,
                                       const std::uint16_t* a, std::int64_t a_stride,
                                       std::int64_t count, Consume&& consume) const noexcept {
  const std::uint8_t* group0 = g_run.group0;
  const std::size_t group_bytes = g_run.group_bytes;
  const std::uint8_t* fold = g_run.fold;
  const int groups = g_run.groups, blocks = g_run.blocks;
  const auto tile_elems = static_cast<std::size_t>(blocks) * k::kBTileElems;
  const auto scale_floats = static_cast<std::size_t>(blocks) * 16;
  ops_.tile_config(count < 16 ? static_cast<int>(count) : 16);
  // Unfoldable pairs (rare) are decoded once, up front.
  auto packed = [&](int g) { return group0 + static_cast<std::size_t>(g) * group_bytes; };
  for (int g = 0; g < groups; g += 2) {
    if (fold[g] != 0 && fold[g + 1] != 0) continue;
    for (int i = g; i < g + 2; ++i) {
      ops_.decode_group(packed(i), blocks, fold[i] != 0,
                        s.btiles + static_cast<std::size_t>(i) * tile_elems,
                        s.scales + static_cast<std::size_t>(i) * scale_floats);
    }
  }
  const std::int64_t stride = 16 * groups;
  // Foldable pairs are decoded inside the K loop: with one step of slots into L1 rings,
  // with more into whole-group buffers in the first step, re-read by the later ones
  // (measured both ways, docs/perf/BACKENDS_AMX_BF16.md).
  const bool one_step = count <= kStep;
  for (std::int64_t c0 = 0; c0 < count; c0 += kStep) {
    const int m = static_cast<int>(std::min<std::int64_t>(kStep, count - c0));
    for (int g = 0; g < groups; g += 2) {
      k::GroupPair pair;
      for (int i = 0; i < 2; ++i) {
        const auto gi = static_cast<std::size_t>(g + i);
        pair.tiles[i] = s.btiles + gi * tile_elems;
        pair.block_scale[i] = s.scales + gi * scale_floats;
        pair.fold[i] = fold[g + i] != 0;
      }
      if (pair.fold[0] && pair.fold[1] && c0 == 0) {
        pair.packed[0] = packed(g);
        pair.packed[1] = packed(g + 1);
        pair.ring = one_step;
      }
      ops_.gemm_pair(pair, blocks, a + c0 / 16 * a_stride, a_stride, m, s.h + 16 * g, stride, s.c);
    }
    consume(c0, m, s.h);
  }
  ops_.tile_release();
}

// mxfp8: GEMM1's results of m slots (rows of [gate 0-15|up 0-15|gate 16-31|up 16-31]) as one
// 32-unit MX block per row: the portable activation, then MXFP8, into the row tiles at a.
inline void AmxBf16Kernel::glu_rows_to_mxfp8(const float* acc, int m, const float* gate_bias,
                                             const float* up_bias, std::byte* round_scratch,
                                             std::uint16_t* a,
                                             std::int64_t a_tile_stride) const noexcept {
  float block[32];
  std::uint16_t bits[32];
  for (int r = 0; r < m; ++r) {
    const float* row = acc + 64 * r;
    for (int j = 0; j < 32; ++j) {
      const int at = j < 16 ? j : 16 + j;  // [gate 0-15|up 0-15|gate 16-31|up 16-31]
      block[j] = activate(spec_.activation, spec_.activation_params, row[at] + gate_bias[j],
                          row[at + 16] + up_bias[j]);
    }
    round_activations_bf16(ActivationFormat::mxfp8, block, bits, round_scratch);
    std::memcpy(a + (r / 16) * a_tile_stride + (r % 16) * 32, bits, sizeof bits);
  }
}

// Phase 2: GEMM1 for 32 intermediate units (4 groups: gate, up, gate, up), GLU, bf16.
inline void AmxBf16Kernel::gemm1_glu(const Call& c) const noexcept {
  const std::int64_t inter = inter_;
  driver::for_each_expert_tile(
      c.f, inter / kTaskRows, kStep,
      [&](std::int64_t e, std::int64_t jt, std::int64_t /*first*/, std::int64_t count, int thread) {
        const std::int64_t tile0 = c.tile_start[e];
        const std::int64_t g0 = 4 * jt;
        const std::uint8_t* fold =
            w1_fold_.data() + static_cast<std::size_t>(e * (2 * inter / group16::kRows) + g0);
        const float* gate_bias = packed_.gate_bias.data() + e * inter + kTaskRows * jt;
        const float* up_bias = packed_.up_bias.data() + e * inter + kTaskRows * jt;
        gemm_groups(c.scratch(thread),
                    {packed_.w1_group(e, g0), packed_.w1_group_bytes(), fold, 4, c.nbh},
                    c.xb + tile0 * c.x_tile_stride, c.x_tile_stride, count,
                    [&](std::int64_t c0, int m, const float* acc) {
                      std::uint16_t* a = c.ab + (tile0 + c0 / 16) * c.a_tile_stride + jt * kATile;
                      if (!mxfp8_) {
                        ops_.glu_to_bf16(acc, m, gate_bias, up_bias, glu_, a, c.a_tile_stride);
                        return;
                      }
                      glu_rows_to_mxfp8(acc, m, gate_bias, up_bias,
                                        c.thread_region(thread) + c.l.t_round, a, c.a_tile_stride);
                    });
      });
}

// Phase 3: GEMM2 for 32 output rows (2 groups), + b2, into the slots' outputs.
inline void AmxBf16Kernel::gemm2_plus_bias(const Call& c) const noexcept {
  const ExpertForward& f = c.f;
  const std::int64_t h = hidden_;
  driver::for_each_expert_tile(
      f, h / kTaskRows, kStep,
      [&](std::int64_t e, std::int64_t ot, std::int64_t first, std::int64_t count, int thread) {
        const std::int64_t tile0 = c.tile_start[e];
        const std::int64_t g0 = 2 * ot;
        const std::uint8_t* fold =
            w2_fold_.data() + static_cast<std::size_t>(e * (h / group16::kRows) + g0);
        const float* bias = packed_.b2.data() + e * h + kTaskRows * ot;
        gemm_groups(c.scratch(thread),
                    {packed_.w2_group(e, g0), packed_.w2_group_bytes(), fold, 2, c.nbi},
                    c.ab + tile0 * c.a_tile_stride, c.a_tile_stride, count,
                    [&](std::int64_t c0, int m, const float* acc) {
                      driver::store_plus_bias(f, first + c0, m, acc, kTaskRows, 1, kTaskRows, bias,
                                              h, kTaskRows * ot);
                    });
      });
}

void AmxBf16Kernel::run(const ExpertForward& f) const noexcept {
  if (f.batch.slots <= 0 || f.batch.num_experts <= 0) return;
  const Call c = call_of(f);
  if (c.row_tiles == 0) return;
  round_inputs_to_tiles(c);
  gemm1_glu(c);
  gemm2_plus_bias(c);
}

}  // namespace

std::unique_ptr<ExpertKernel> make_amx_bf16_kernel(const LayerSpec& spec,
                                                   const LayerWeights& weights,
                                                   ActivationFormat format,
                                                   const AmxBf16Ops& ops) {
  return std::make_unique<AmxBf16Kernel>(spec, weights, format, ops);
}

}  // namespace mxmoe::amx_bf16_backend
