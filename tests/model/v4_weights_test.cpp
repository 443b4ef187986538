// The weight views DeepSeek-V4 needs: MXFP4 experts in per-expert segments (w1 and w3 at
// their own addresses), the dense FP8 / bf16 / f32 shared expert, the hash table tid2eid;
// and the spec fields of hash layers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layer/layer_fixture.hpp"
#include "mxfp4_copy.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/weights.hpp"

namespace {

using mxmoe::DenseMatrixView;
using mxmoe::ElementType;
using mxmoe::LayerSpec;
using mxmoe::LayerWeights;
using mxmoe::Mxfp4Segment;
using mxmoe::Mxfp4View;

void expect_invalid(const LayerSpec& s, const LayerWeights& w, const std::string& needle) {
  try {
    mxmoe::validate(s, w);
    ADD_FAILURE() << "accepted weights without " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Two experts whose gate and up halves live in four unrelated buffers: each row reads from
// the right buffer, a slice renumbers experts, and a NaN scale is found in any segment and
// reported at its row of the whole matrix.
TEST(Mxfp4Segments, RowsComeFromTheirOwnSegment) {
  const std::int64_t rows = 8, cols = 64;  // per expert: gate rows 0-3, up rows 4-7
  std::vector<std::vector<std::uint8_t>> blocks(4), scales(4);
  std::vector<Mxfp4Segment> table;
  for (int seg = 0; seg < 4; ++seg) {
    blocks[static_cast<std::size_t>(seg)].assign(4 * cols / 2, static_cast<std::uint8_t>(seg));
    scales[static_cast<std::size_t>(seg)].assign(4 * cols / 32,
                                                 static_cast<std::uint8_t>(100 + seg));
  }
  // Expert 0: segments 2 (gate) and 0 (up); expert 1: 3 and 1 (deliberately out of order).
  for (int seg : {2, 0, 3, 1})
    table.push_back({blocks[static_cast<std::size_t>(seg)].data(),
                     scales[static_cast<std::size_t>(seg)].data()});
  const Mxfp4View v = Mxfp4View::segmented(table, 2, 2, rows, cols);
  EXPECT_EQ(v.row_blocks(0, 0), blocks[2].data());
  EXPECT_EQ(v.row_blocks(0, 5), blocks[0].data() + 1 * cols / 2);
  EXPECT_EQ(v.row_scale(1, 7), scales[1].data() + 3 * cols / 32);
  EXPECT_EQ(v.row_scale(1, 3)[1], 103);
  const Mxfp4View s = v.slice({1, 2});
  EXPECT_EQ(s.experts, 1);
  EXPECT_EQ(s.row_blocks(0, 4), blocks[1].data());
  // A segment table that does not match experts x parts is refused.
  EXPECT_THROW(Mxfp4View::segmented(table, 2, 3, rows, cols), std::invalid_argument);
  EXPECT_THROW(Mxfp4View::segmented(table, 3, 2, rows, cols), std::invalid_argument);

  // In a layer: a NaN scale in expert 1's up half is named at row 4 + its row in the half.
  LayerSpec spec = mxmoe::preset("deepseek-v4-flash");
  spec.num_experts = 2;
  spec.top_k = 1;
  spec.hidden = 64;
  spec.intermediate = 4 * 8;  // 32: W1 has 64 rows
  spec.shared_experts = 0;
  spec.shared_intermediate = 0;
  spec.shared_weight_format = mxmoe::ElementType::mxfp4;
  const auto storage = mxmoe::LayerStorage::random(spec, 3);
  LayerWeights w = storage.weights();
  ASSERT_EQ(w.w1.parts, 2);  // the random layer stores halves apart
  EXPECT_NO_THROW(mxmoe::validate(spec, w));
  mxmoe::testing::Mxfp4Copy copy(w.w1);
  std::vector<Mxfp4Segment> t;
  for (std::int64_t e = 0; e < 2; ++e)
    for (int p = 0; p < 2; ++p)
      t.push_back({copy.blocks.data() + (e * 64 + p * 32) * 32,
                   copy.scales.data() + (e * 64 + p * 32) * 2});
  copy.scales[static_cast<std::size_t>((1 * 64 + 32 + 5) * 2 + 1)] = mxmoe::kE8m0Nan;
  w.w1 = Mxfp4View::segmented(t, 2, 2, 64, 64);
  expect_invalid(spec, w, "expert 1, row 37, block 1");
}

// E4M3 with E8M0 and with float32 block scales of 128 x 128 blocks (a partial last block),
// bf16 and f32: value() against the definition of each format.
TEST(DenseMatrix, ValuesOfEveryStorage) {
  const std::int64_t rows = 130, cols = 200;  // 2 x 2 scale blocks, the last ones partial
  std::mt19937 rng(5);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols));
  for (auto& c : codes) {
    c = static_cast<std::uint8_t>(rng() % 256);
    if ((c & 0x7F) == 0x7F) c = 0x3A;  // no NaN codes
  }
  const std::uint8_t e8m0[4] = {120, 127, 131, 90};
  const float f32_scales[4] = {0.75f, -1.0f, 3.0e-3f, 1.0e5f};
  DenseMatrixView v;
  v.element = ElementType::fp8_e4m3;
  v.rows = rows;
  v.cols = cols;
  v.segment[0] = {codes.data(), e8m0};
  ASSERT_EQ(v.scale_rows(), 2);
  ASSERT_EQ(v.scale_cols(), 2);
  for (std::int64_t r : {0, 127, 128, 129})
    for (std::int64_t c : {0, 127, 128, 199}) {
      const std::uint8_t code = codes[static_cast<std::size_t>(r * cols + c)];
      const int block = static_cast<int>(r / 128 * 2 + c / 128);
      const int exponent = (code >> 3) & 15, mantissa = code & 7;
      const double magnitude =
          exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
      const double value = (code & 0x80 ? -magnitude : magnitude);
      EXPECT_EQ(v.value(r, c), value * std::ldexp(1.0, e8m0[block] - 127)) << r << "," << c;
      DenseMatrixView f = v;
      f.scale_e8m0 = false;
      f.segment[0].scales = f32_scales;
      EXPECT_EQ(f.value(r, c), value * static_cast<double>(f32_scales[block]));
    }
  EXPECT_EQ(v.bytes(), static_cast<std::size_t>(rows * cols + 4));
  const std::uint16_t b[2] = {mxmoe::f32_to_bf16(-1.5f), mxmoe::f32_to_bf16(0.09375f)};
  DenseMatrixView vb;
  vb.element = ElementType::bf16;
  vb.rows = 2;
  vb.cols = 1;
  vb.parts = 2;  // two one-row segments
  vb.segment[0] = {&b[1], nullptr};
  vb.segment[1] = {&b[0], nullptr};
  EXPECT_EQ(vb.value(0, 0), 0.09375);
  EXPECT_EQ(vb.value(1, 0), -1.5);
}

LayerSpec small_v4(bool hash) {
  LayerSpec s =
      layer_test::shrink(hash ? "deepseek-v4-flash-hash" : "deepseek-v4-flash", 8, 3, 128, 64);
  if (hash) s.vocab = 50;
  return s;
}

TEST(TokenExperts, ValidateRefusesBadTables) {
  const LayerSpec spec = small_v4(true);
  const auto storage = mxmoe::LayerStorage::random(spec, 8);
  EXPECT_NO_THROW(mxmoe::validate(spec, storage.weights()));
  std::vector<std::int64_t> ids(50 * 3);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 3);
  LayerWeights w = storage.weights();
  w.token_experts = {ids.data(), true, 50, 3};
  EXPECT_NO_THROW(mxmoe::validate(spec, w));  // int64 storage is read as such
  ids[7 * 3 + 2] = 8;
  expect_invalid(spec, w, "token 7 slot 2 names expert 8");
  ids[7 * 3 + 2] = 0;  // the token's slot 0 already names expert 0
  expect_invalid(spec, w, "token 7 names expert 0 twice");
  ids[7 * 3 + 2] = 2;
  w.token_experts.vocab = 49;
  expect_invalid(spec, w, "token_experts has shape");
  w.token_experts = {};
  expect_invalid(spec, w, "tid2eid");
  // A routed layer must not carry a table.
  const LayerSpec routed = small_v4(false);
  const mxmoe::LayerStorage routed_storage = mxmoe::LayerStorage::random(routed, 9);  // outlives r
  LayerWeights r = routed_storage.weights();
  r.token_experts = {ids.data(), true, 50, 3};
  expect_invalid(routed, r, "not hash-routed");
}

TEST(SharedExpert, DenseFormatsValidateAndNameBadValues) {
  for (const auto format :
       {mxmoe::ElementType::fp8_e4m3, mxmoe::ElementType::bf16, mxmoe::ElementType::f32}) {
    SCOPED_TRACE(std::string(mxmoe::to_string(format)));
    LayerSpec spec = small_v4(false);
    spec.shared_weight_format = format;
    const auto storage = mxmoe::LayerStorage::random(spec, 10);
    const LayerWeights& w = storage.weights();
    EXPECT_NO_THROW(mxmoe::validate(spec, w));
    EXPECT_TRUE(w.shared_w1.empty());
    EXPECT_EQ(w.shared_dense_w1.parts, 2);
    // The spec says another format than the views hold.
    LayerSpec other = spec;
    other.shared_weight_format =
        format == mxmoe::ElementType::bf16 ? mxmoe::ElementType::f32 : mxmoe::ElementType::bf16;
    expect_invalid(other, w, "shared_weight_format");
    // A view of an element type no DenseMatrixView holds is refused by name.
    LayerWeights mx = w;
    mx.shared_dense_w1.element = mxmoe::ElementType::mxfp4;
    expect_invalid(spec, mx, "shared_w1: a DenseMatrixView holds f32, bf16 or fp8_e4m3, not mxfp4");
  }
  // An E4M3 NaN code in the up half of the FP8 shared expert.
  LayerSpec spec = small_v4(false);
  const auto storage = mxmoe::LayerStorage::random(spec, 11);
  LayerWeights w = storage.weights();
  std::vector<std::uint8_t> up(
      static_cast<const std::uint8_t*>(w.shared_dense_w1.segment[1].data),
      static_cast<const std::uint8_t*>(w.shared_dense_w1.segment[1].data) + 64 * 128);
  up[3 * 128 + 5] = 0xFF;
  w.shared_dense_w1.segment[1].data = up.data();
  expect_invalid(spec, w, "shared_w1 holds the E4M3 NaN code at row 67, column 5");
}

TEST(HashSpec, ValidatesVocabAndRoundTripsJson) {
  LayerSpec s = small_v4(true);
  EXPECT_NO_THROW(mxmoe::validate(s));
  EXPECT_EQ(mxmoe::layer_spec_from_json(mxmoe::to_json(s)), s);
  s.routing_params.score_function = mxmoe::ScoreFunction::softmax;
  s.shared_weight_format = mxmoe::ElementType::bf16;
  EXPECT_EQ(mxmoe::layer_spec_from_json(mxmoe::to_json(s)), s);
  s.vocab = 0;
  EXPECT_THROW(mxmoe::validate(s), std::invalid_argument);
  LayerSpec routed = small_v4(false);
  routed.vocab = 10;  // only hash routing reads it
  EXPECT_THROW(mxmoe::validate(routed), std::invalid_argument);
  routed.vocab = 0;
  routed.shared_experts = 0;
  routed.shared_intermediate = 0;  // fp8_e4m3 left without a shared expert
  EXPECT_THROW(mxmoe::validate(routed), std::invalid_argument);
}

}  // namespace
