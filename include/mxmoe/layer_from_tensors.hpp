// A MoE layer's weights from tensors a host holds in its own memory (an engine such as vLLM or
// SGLang) instead of a checkpoint directory: MXFP4 blocks and E8M0 scales in the common
// layouts, read in place (views, never copied) and validated by the checkpoint path's own
// validate(). Then the usual make_layer():
//
//   LayerSpec math = family_math(Family::gpt_oss);
//   math.top_k = 4;
//   LayerTensors t;
//   t.w13_blocks = {w13, TensorDtype::u8, {E, 2 * I, H / 2}};   // and the other tensors
//   ...
//   const TensorLayer from = layer_from_tensors(math, t);
//   MoeLayer layer = make_layer(from.spec, from.weights, hardware, request, runtime);
//   if (!layer.reads_weight_views()) { /* the host may free its tensors now */ }
//
// docs/PYTHON.md and docs/C_API.md map vLLM's and SGLang's fused-experts tensors to these
// fields.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// The element type of a tensor handed over: its storage, as the host's array library names it
// (torch.uint8, float32, bfloat16; the C API's mxmoe_dtype, value for value), which messages
// name that way ("uint8", "float32", "bfloat16"). It is not ElementType, and deliberately not
// folded into it: ElementType (mxmoe/element_type.hpp) names what a layer's weights are stored
// as (mxfp4 = E2M1 codes with their E8M0 scales), and a tensor here holds only half of such a
// pair, as bytes: an MXFP4 layer's blocks and its scales are two u8 tensors, neither of which
// is an ElementType; an ElementType `u8` would be one no weight has, and every switch, name
// list and count of ElementType would grow by it. Nor is it the safetensors file's dtype list
// (StDtype, internal to src/io): that one is a file format's, with integer and float8 types no
// host hands over. A bias or router tensor's f32 / bf16 becomes the ElementType of the view made
// of it (DenseView).
enum class TensorDtype : std::uint8_t { u8, f32, bf16 };

// A row-major, dense tensor in the caller's memory: data holds every element of shape in order
// (f32 and bf16 data aligned to their element size). Empty when data is null. The caller
// vouches that the memory holds the whole shape; nothing else about it can be checked.
struct MXMOE_API HostTensor {
  const void* data = nullptr;
  TensorDtype dtype = TensorDtype::u8;
  std::vector<std::int64_t> shape;
  bool empty() const noexcept { return data == nullptr; }
};

// DeepSeek's checkpoints: each expert's projections as their own tensors, E entries each.
//   w1_blocks[e] (gate) / w3_blocks[e] (up): [I, H/2] or [I, H/32, 16]; scales [I, H/32]
//   w2_blocks[e] (down): [H, I/2] or [H, I/32, 16]; scales [H, I/32]
struct MXMOE_API PerExpertTensors {
  std::vector<HostTensor> w1_blocks, w1_scales, w3_blocks, w3_scales, w2_blocks, w2_scales;
  bool empty() const noexcept;
};

// The tensors of one MoE layer. MXFP4 blocks and scales are uint8: byte j of a 32-element
// block holds element 2j in its low nibble and 2j+1 in its high nibble (the gpt-oss and OCP
// order); a scale byte is an E8M0 exponent, 2^(s-127) (0xFF, NaN, is refused).
struct MXMOE_API LayerTensors {
  // Fused: every expert in one tensor per projection (gpt-oss, vLLM, SGLang).
  //   w13_blocks [E, 2I, H/2] or [E, 2I, H/32, 16], w13_scales [E, 2I, H/32]: gate and up rows
  //     in spec.gate_up_layout (interleaved: even rows gate, odd rows up, as gpt-oss and vLLM's
  //     CPU MXFP4 path hold them; halves: rows [0, I) gate, [I, 2I) up)
  //   w2_blocks [E, H, I/2] or [E, H, I/32, 16], w2_scales [E, H, I/32]
  HostTensor w13_blocks, w13_scales, w2_blocks, w2_scales;
  // Or per expert, instead of the four above (W1 is then w1's rows, then w3's: halves).
  PerExpertTensors per_expert;
  // f32 or bf16, each optional as the spec says:
  HostTensor w13_bias;        // [E, 2I], rows in W1's order (spec.expert_bias)
  HostTensor w2_bias;         // [E, H] (spec.expert_bias)
  HostTensor router_weight;   // [E, H]; without it the layer runs only with routing given
  HostTensor router_bias;     // [E] (spec.router_bias; only with router_weight)
  HostTensor selection_bias;  // [E] (spec.routing_params.selection_bias, DeepSeek's
                              // e_score_correction_bias; only with router_weight)
};

// Single parts of a family's math to change (unset: the family's).
struct MXMOE_API MathOverrides {
  std::optional<ActivationFn> activation{};
  std::optional<float> alpha{};  // swiglu_oai only
  std::optional<float> limit{};  // swiglu_oai and silu_glu_clamp
  std::optional<RoutingMethod> routing{};
  std::optional<bool> renormalize{};
  std::optional<float> routed_scaling_factor{};
  std::optional<int> n_group{}, topk_group{};  // sigmoid_group_topk only
  std::optional<GateUpLayout> gate_up{};
  std::optional<bool> expert_bias{};
};

// FAMILY's math, as its preset has it (routing with its parameters, activation with alpha and
// limit, expert and router biases, the gate/up layout the family's engines hold: interleaved
// for gpt_oss, halves for the others), sizes 0 (layer_from_tensors reads them from the
// tensors), no shared expert (an engine runs it itself), and no DeepSeek-V3 group limit
// (n_group = topk_group = 1: the groups depend on the model's size), then OVERRIDES. Throws
// std::invalid_argument naming an override that does not apply (alpha for an activation that
// has none, n_group for a routing without groups).
MXMOE_API LayerSpec family_math(Family family, const MathOverrides& overrides = {});

// What a layer is made of: the spec (MATH with the sizes read from the tensors) and views on
// the caller's memory. The views' segment tables are shared (copies are cheap); the bytes stay
// the caller's: they must outlive every layer made from them unless the layer packed its own
// copy (MoeLayer::reads_weight_views() is false once it is constructed).
struct MXMOE_API TensorLayer {
  LayerSpec spec;
  LayerWeights weights;
};

// Reads E, H and I from the tensors' shapes into MATH (sizes MATH sets must agree), checks every
// tensor's dtype and shape against them (errors name the tensor and the numbers), and validates
// the result with validate(spec, weights), the function a checkpoint's layer goes through: the
// same bounds, the NaN scale 0xFF refused, non-finite biases and router values refused.
// Without router_weight the spec records no router or selection bias. Hash routing and shared
// experts are not built from tensors. Throws std::invalid_argument.
MXMOE_API TensorLayer layer_from_tensors(const LayerSpec& math, const LayerTensors& tensors);

}  // namespace mxmoe
