// The gpt-oss Hugging Face layout (FORMATS.md §3), which mxmoe also writes for every family
// (`mxmoe quantize`). Per layer N, prefix P = "model.layers.N.mlp.":
//   P router.weight [E,H], P router.bias [E] (when spec.router_bias),
//   P router.e_score_correction_bias [E] (DeepSeek selection bias; mxmoe's name),
//   P experts.{gate_up,down}_proj_{blocks,scales} (U8), P experts.{gate_up,down}_proj_bias
//   (when spec.expert_bias), P shared_experts.{gate_up,down}_proj_{blocks,scales} with one
//   fused shared expert (when spec.shared_experts > 0; mxmoe's names).
// Dense tensors are BF16 or F32.
#pragma once

#include <string>
#include <vector>

#include "io/tensor_set.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::io {

// Views of layer N's tensors with every dtype and shape checked against SPEC (errors name
// the tensor, the expected and the actual). With check_values, also scans the bytes of this
// layer only: E8M0 scale 0xFF (NaN) and NaN/Inf in dense tensors are LoadErrors naming the
// tensor and the index. scale_experts, when given, limits the scan of the routed experts'
// scales to those experts (an expert-parallel rank reads no page of the others).
LayerWeights bind_gpt_oss_layer(const TensorSet& set, const LayerSpec& spec, int layer,
                                bool check_values,
                                const std::vector<ExpertRange>* scale_experts = nullptr);

// When layer N holds BF16/F32 per-expert weights (Mixtral / Qwen3-MoE / DeepSeek naming, or
// gpt-oss's unquantized gate_up_proj), names one such tensor; otherwise "".
std::string find_unquantized_expert_tensor(const TensorSet& set, int layer);

}  // namespace mxmoe::io
