// DeepSeek-V4 in its own tensor naming: the release (DeepSeek's convert.py names, no "model."
// prefix) and what transformers' save_pretrained writes back from DeepseekV4ForCausalLM
// (its conversion mapping reversed, under "model."). Per MoE layer N, P = "[model.]layers.N.ffn.":
//   P gate.weight                 [E, H]        BF16/F32 router
//   P gate.bias                   [E]           F32/BF16 selection bias (routed layers)
//   P gate.tid2eid                [vocab, k]    I32/I64  experts per token id (hash layers)
//   P experts.e.{w1,w3,w2}.weight [N, K/2]      I8/U8    E2M1 pairs, even element in the low
//                                 ([N, K] F4)           nibble (w1 gate, w3 up, w2 down)
//   P experts.e.{w1,w3,w2}.scale  [N, K/32]     F8_E8M0/U8
//   P shared_experts.{w1,w3,w2}.weight  FP8 E4M3 [N, K] with .scale [ceil(N/128), ceil(K/128)]
//                                       F8_E8M0 (or F32), or BF16/F32 [N, K], or MXFP4 as above
// Sources of every name and dtype: docs/CHECKPOINTS.md. Views only: the routed experts are
// read where they lie (w1 and w3 are two segments of the layer's W1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/tensor_set.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::io {

// "layers.N.ffn." or "model.layers.N.ffn." when layer N has V4-named routed experts.
std::optional<std::string> find_deepseek_v4_prefix(const TensorSet& set, int layer);

// How the routed experts under PREFIX are stored.
enum class V4ExpertStorage { mxfp4, dense, fp8 };
V4ExpertStorage deepseek_v4_expert_storage(const TensorSet& set, const std::string& prefix);

// The shared expert's format from its w1 tensor (LoadError for an unknown dtype/shape).
ElementType deepseek_v4_shared_format(const TensorSet& set, const std::string& prefix);

// Views of the layer under PREFIX, every dtype and shape checked against SPEC; with
// check_values also the values of this layer (E8M0 0xFF scales, NaN/Inf in dense tensors);
// scale_experts, when given, limits the scan of the routed experts' scales to those experts.
LayerWeights bind_deepseek_v4_layer(const TensorSet& set, const LayerSpec& spec,
                                    const std::string& prefix, bool check_values,
                                    const std::vector<ExpertRange>* scale_experts = nullptr);

}  // namespace mxmoe::io
