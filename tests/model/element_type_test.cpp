// ElementType, the one vocabulary of element types: names and their parser (the former
// spelling "e4m3" included), the safetensors dtypes' mapping onto it, and the views that hold
// only some of them refusing the others by name.
#include "mxmoe/element_type.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace {

using mxmoe::ElementType;

// The message of the std::invalid_argument F throws ("" when it throws none).
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ElementType, EveryTypeRoundTripsItsName) {
  const std::vector<std::string> names = {"mxfp4", "bf16", "f32", "fp8_e4m3"};
  ASSERT_EQ(names.size(), static_cast<std::size_t>(mxmoe::kElementTypeCount));
  for (int i = 0; i < mxmoe::kElementTypeCount; ++i) {
    const auto t = static_cast<ElementType>(i);
    EXPECT_EQ(mxmoe::to_string(t), names[static_cast<std::size_t>(i)]);
    EXPECT_EQ(mxmoe::parse_element_type(mxmoe::to_string(t)), t);
    EXPECT_EQ(mxmoe::find_element_type(mxmoe::to_string(t)), t);
    EXPECT_EQ(mxmoe::parse_weight_format(mxmoe::to_string(t)), t);
  }
  EXPECT_EQ(mxmoe::element_bits(ElementType::mxfp4), 4);
  EXPECT_EQ(mxmoe::element_bits(ElementType::bf16), 16);
  EXPECT_EQ(mxmoe::element_bits(ElementType::f32), 32);
  EXPECT_EQ(mxmoe::element_bits(ElementType::fp8_e4m3), 8);
  EXPECT_TRUE(mxmoe::has_block_scales(ElementType::mxfp4));
  EXPECT_TRUE(mxmoe::has_block_scales(ElementType::fp8_e4m3));
  EXPECT_FALSE(mxmoe::has_block_scales(ElementType::bf16));
}

TEST(ElementType, FormerSpellingsParseAndOthersAreRefusedWithTheNames) {
  EXPECT_EQ(mxmoe::parse_element_type("e4m3"), ElementType::fp8_e4m3);  // DenseElement's
  EXPECT_EQ(mxmoe::parse_weight_format("e4m3"), ElementType::fp8_e4m3);
  EXPECT_EQ(mxmoe::find_element_type("fp4"), std::nullopt);
  EXPECT_EQ(refusal([] { mxmoe::parse_weight_format("fp4"); }),
            "unknown weight format 'fp4' (valid: mxfp4, bf16, f32, fp8_e4m3)");
  EXPECT_EQ(refusal([] { mxmoe::parse_element_type("F32"); }),
            "unknown element type 'F32' (valid: mxfp4, bf16, f32, fp8_e4m3)");
}

TEST(ElementType, SafetensorsDtypesMapOntoIt) {
  using mxmoe::StDtype;
  EXPECT_EQ(mxmoe::element_type(StDtype::F32), ElementType::f32);
  EXPECT_EQ(mxmoe::element_type(StDtype::BF16), ElementType::bf16);
  EXPECT_EQ(mxmoe::element_type(StDtype::F8_E4M3), ElementType::fp8_e4m3);
  // Integer types, other floats, and the halves of an MXFP4 weight are not element types.
  for (const StDtype d : {StDtype::U8, StDtype::I8, StDtype::I64, StDtype::F4, StDtype::F8_E8M0,
                          StDtype::F16, StDtype::F64})
    EXPECT_EQ(mxmoe::element_type(d), std::nullopt) << mxmoe::to_string(d);
}

TEST(DenseView, RefusesAnElementTypeItCannotHoldByName) {
  const float values[2] = {1.5f, -2.0f};
  EXPECT_EQ(mxmoe::DenseView(ElementType::f32, values, 1, 2).at(1), -2.0f);
  EXPECT_EQ(refusal([&] { mxmoe::DenseView(ElementType::fp8_e4m3, values, 1, 2); }),
            "a DenseView holds f32 or bf16, not fp8_e4m3");
  EXPECT_EQ(refusal([&] { mxmoe::DenseView(ElementType::mxfp4, values, 1, 2); }),
            "a DenseView holds f32 or bf16, not mxfp4");
  // A type assigned afterwards: no read, and validate() names the tensor.
  mxmoe::DenseView v(ElementType::f32, values, 1, 2);
  v.dtype = ElementType::mxfp4;
  EXPECT_EQ(refusal([&] { (void)v.at(0); }), "a DenseView holds f32 or bf16, not mxfp4");
  EXPECT_EQ(refusal([&] { (void)v.element_bytes(); }), "a DenseView holds f32 or bf16, not mxfp4");
  const mxmoe::LayerSpec spec = mxmoe::preset("tiny");
  const auto storage = mxmoe::LayerStorage::random(spec, 1);
  mxmoe::LayerWeights w = storage.weights();
  w.router_weight.dtype = ElementType::fp8_e4m3;
  EXPECT_EQ(refusal([&] { mxmoe::validate(spec, w); }),
            "router_weight: a DenseView holds f32 or bf16, not fp8_e4m3");
}

TEST(DenseMatrixView, RefusesMxfp4ByName) {
  const std::uint16_t values[4] = {0x3F80, 0x4000, 0x4040, 0x4080};
  mxmoe::DenseMatrixView v;
  v.element = ElementType::bf16;
  v.segment[0].data = values;
  v.rows = 2;
  v.cols = 2;
  EXPECT_EQ(v.value(1, 1), 4.0);
  EXPECT_EQ(v.bytes(), 8u);
  v.element = ElementType::mxfp4;
  const std::string want = "a DenseMatrixView holds f32, bf16 or fp8_e4m3, not mxfp4";
  EXPECT_EQ(refusal([&] { (void)v.value(0, 0); }), want);
  EXPECT_EQ(refusal([&] { (void)v.bytes(); }), want);
}

}  // namespace
