// Generated checkpoints of three families for the expert-parallel tests, written the way
// users get them: gpt-oss in its MXFP4 release layout (tests/io's writer), DeepSeek-V3 (a
// shared expert, grouped sigmoid routing, selection bias) and Qwen3-MoE as BF16 per-expert
// Hugging Face checkpoints converted by `mxmoe quantize` (produce::quantize_checkpoint).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "io/io_fixtures.hpp"
#include "io/safetensors.hpp"
#include "produce/quantize_checkpoint.hpp"

namespace mpi_test {

struct FamilyCheckpoint {
  std::string name;  // "gpt-oss", "deepseek-v3", "qwen3"
  std::string dir;   // MXFP4 checkpoint, layer 0 is a MoE layer
};

// A BF16 per-expert checkpoint (HF names: mlp.gate, mlp.experts.{e}.{gate,up,down}_proj,
// mlp.shared_experts.*), then quantized into out_dir.
inline void write_bf16_family(const std::string& in_dir, const std::string& out_dir,
                              const nlohmann::json& config, int experts, int hidden, int inter,
                              int shared_inter, bool selection_bias, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<std::uint8_t>> keep;
  keep.reserve(static_cast<std::size_t>(3 * experts + 8));
  std::vector<mxmoe::TensorToWrite> tensors;
  const auto add = [&](const std::string& name, std::vector<std::uint64_t> shape,
                       std::vector<std::uint8_t> bytes) {
    keep.push_back(std::move(bytes));
    tensors.push_back({name, mxmoe::StDtype::BF16, std::move(shape), keep.back()});
  };
  const auto u = [](int v) { return static_cast<std::uint64_t>(v); };
  const auto bf16 = [&](std::size_t n, float scale) {
    return mxmoe::testing_io::bf16_bytes(mxmoe::testing_io::random_bf16_values(rng, n, scale));
  };
  const auto sz = [](int a, int b) {
    return static_cast<std::size_t>(a) * static_cast<std::size_t>(b);
  };
  const std::string p = "model.layers.0.mlp.";
  add(p + "gate.weight", {u(experts), u(hidden)}, bf16(sz(experts, hidden), 0.2f));
  if (selection_bias)
    add(p + "gate.e_score_correction_bias", {u(experts)}, bf16(sz(experts, 1), 0.05f));
  for (int e = 0; e < experts; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    add(q + "gate_proj.weight", {u(inter), u(hidden)}, bf16(sz(inter, hidden), 0.05f));
    add(q + "up_proj.weight", {u(inter), u(hidden)}, bf16(sz(inter, hidden), 0.05f));
    add(q + "down_proj.weight", {u(hidden), u(inter)}, bf16(sz(hidden, inter), 0.05f));
  }
  if (shared_inter > 0) {
    const std::string q = p + "shared_experts.";
    add(q + "gate_proj.weight", {u(shared_inter), u(hidden)},
        bf16(sz(shared_inter, hidden), 0.05f));
    add(q + "up_proj.weight", {u(shared_inter), u(hidden)}, bf16(sz(shared_inter, hidden), 0.05f));
    add(q + "down_proj.weight", {u(hidden), u(shared_inter)},
        bf16(sz(hidden, shared_inter), 0.05f));
  }
  mxmoe::write_safetensors(in_dir + "/model.safetensors", tensors);
  mxmoe::testing_io::write_config(in_dir, config);
  mxmoe::produce::quantize_checkpoint(in_dir, out_dir, {});
}

// The three families under root (which must exist), E experts of width H x I, top-4.
inline std::vector<FamilyCheckpoint> write_family_checkpoints(const std::string& root, int experts,
                                                              int hidden, int inter) {
  namespace fs = std::filesystem;
  std::vector<FamilyCheckpoint> out;
  {
    const std::string dir = root + "/gpt-oss";
    fs::create_directories(dir);
    mxmoe::testing_io::Dims d;
    d.experts = experts;
    d.top_k = 4;
    d.hidden = hidden;
    d.intermediate = inter;
    d.layers = 1;
    mxmoe::testing_io::write_gpt_oss_checkpoint(dir, d, /*sharded=*/false, 17);
    out.push_back({"gpt-oss", dir});
  }
  {
    fs::create_directories(root + "/deepseek-bf16");
    const nlohmann::json config = {{"model_type", "deepseek_v3"},
                                   {"n_routed_experts", experts},
                                   {"num_experts_per_tok", 4},
                                   {"hidden_size", hidden},
                                   {"moe_intermediate_size", inter},
                                   {"intermediate_size", 4 * inter},
                                   {"n_shared_experts", 1},
                                   {"n_group", 4},
                                   {"topk_group", 2},
                                   {"routed_scaling_factor", 2.5},
                                   {"num_hidden_layers", 1},
                                   {"first_k_dense_replace", 0},
                                   {"moe_layer_freq", 1},
                                   {"scoring_func", "sigmoid"},
                                   {"topk_method", "noaux_tc"},
                                   {"norm_topk_prob", true}};
    write_bf16_family(root + "/deepseek-bf16", root + "/deepseek-v3", config, experts, hidden,
                      inter, inter, true, 23);
    out.push_back({"deepseek-v3", root + "/deepseek-v3"});
  }
  {
    fs::create_directories(root + "/qwen3-bf16");
    const nlohmann::json config = {
        {"model_type", "qwen3_moe"},      {"num_experts", experts},
        {"num_experts_per_tok", 4},       {"hidden_size", hidden},
        {"moe_intermediate_size", inter}, {"intermediate_size", 4 * inter},
        {"num_hidden_layers", 1},         {"norm_topk_prob", true},
        {"decoder_sparse_step", 1},       {"mlp_only_layers", nlohmann::json::array()}};
    write_bf16_family(root + "/qwen3-bf16", root + "/qwen3", config, experts, hidden, inter, 0,
                      false, 29);
    out.push_back({"qwen3", root + "/qwen3"});
  }
  return out;
}

}  // namespace mpi_test
