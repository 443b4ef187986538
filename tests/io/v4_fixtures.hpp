// DeepSeek-V4 checkpoints written by the tests' own code, in both namings, and a float64
// evaluation of their layers that shares nothing with the library (its own E2M1 and E4M3
// decoding, routing, activation):
//   - the release naming (DeepSeek's: layers.N.ffn..., FP4 experts as I8 + F8_E8M0, the
//     shared expert in FP8 E4M3 with 128 x 128 E8M0 block scales, gate.bias F32, tid2eid I64,
//     the DeepSeek-style FP8 quantization_config and expert_dtype fp4, num_hash_layers);
//   - transformers' save_pretrained naming (model.layers.N.ffn..., BF16 experts and shared
//     expert, mlp_layer_types), holding exactly the same values, so quantizing it is lossless.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io_fixtures.hpp"

namespace mxmoe::testing_io {

struct V4Dims {
  int experts = 6, top_k = 2, hidden = 64, intermediate = 32, vocab = 50;
  int layers = 2, hash_layers = 1;  // layer 0 hash-routed, layer 1 routed
};

// E4M3 "fn" (bias 7; exponent 0 subnormal; S.1111.111 NaN, never generated here).
inline double e4m3(std::uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

// One matrix [rows, cols] of one expert: MXFP4 bytes as DeepSeek stores them.
struct Fp4Matrix {
  int rows = 0, cols = 0;
  std::vector<std::uint8_t> blocks, scales;  // [rows, cols/2], [rows, cols/32]
  double at(int r, int c) const {
    const std::uint8_t byte = blocks[static_cast<std::size_t>(r * cols / 2 + c / 2)];
    const unsigned code = c % 2 == 0 ? byte & 0xF : byte >> 4;  // even element: low nibble
    return e2m1(code) *
           std::ldexp(1.0, scales[static_cast<std::size_t>(r * cols / 32 + c / 32)] - 127);
  }
};

// One FP8 matrix with E8M0 scales per 128 x 128 block.
struct Fp8Matrix {
  int rows = 0, cols = 0;
  std::vector<std::uint8_t> codes, scales;  // [rows, cols], [ceil(rows/128), ceil(cols/128)]
  double at(int r, int c) const {
    const int scale_cols = (cols + 127) / 128;
    return e4m3(codes[static_cast<std::size_t>(r * cols + c)]) *
           std::ldexp(1.0, scales[static_cast<std::size_t>(r / 128 * scale_cols + c / 128)] - 127);
  }
};

struct V4Layer {
  bool hash = false;
  std::vector<float> router;          // [E, H], exactly bf16 values
  std::vector<float> bias;            // [E] (routed layers)
  std::vector<std::int64_t> tid2eid;  // [vocab, k] (hash layers)
  std::vector<Fp4Matrix> w1, w3, w2;  // per expert: [I, H], [I, H], [H, I]
  Fp8Matrix s1, s3, s2;               // the shared expert: [I, H], [I, H], [H, I]
};

inline Fp4Matrix random_fp4(std::mt19937& rng, int rows, int cols) {
  Fp4Matrix m{rows, cols, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), scale(118, 121);  // ~ 1/sqrt(K) outputs
  for (int i = 0; i < rows * cols / 2; ++i)
    m.blocks.push_back(static_cast<std::uint8_t>(byte(rng)));
  for (int i = 0; i < rows * cols / 32; ++i)
    m.scales.push_back(static_cast<std::uint8_t>(scale(rng)));
  return m;
}

inline Fp8Matrix random_fp8(std::mt19937& rng, int rows, int cols) {
  Fp8Matrix m{rows, cols, {}, {}};
  std::uniform_int_distribution<int> code(0, 255), scale(118, 121);
  for (int i = 0; i < rows * cols; ++i) {
    auto c = static_cast<std::uint8_t>(code(rng));
    if ((c & 0x7F) >= 0x70) c = static_cast<std::uint8_t>(c & 0xB7);  // |v| <= 240, no NaN
    m.codes.push_back(c);
  }
  for (int i = 0; i < ((rows + 127) / 128) * ((cols + 127) / 128); ++i)
    m.scales.push_back(static_cast<std::uint8_t>(scale(rng)));
  return m;
}

inline V4Layer random_v4_layer(const V4Dims& d, bool hash, std::uint32_t seed) {
  std::mt19937 rng(seed);
  V4Layer l;
  l.hash = hash;
  l.router = random_bf16_values(rng, static_cast<std::size_t>(d.experts * d.hidden), 0.2f);
  if (hash) {
    std::vector<std::int64_t> experts(static_cast<std::size_t>(d.experts));
    for (int e = 0; e < d.experts; ++e) experts[static_cast<std::size_t>(e)] = e;
    for (int t = 0; t < d.vocab; ++t) {
      std::shuffle(experts.begin(), experts.end(), rng);
      l.tid2eid.insert(l.tid2eid.end(), experts.begin(), experts.begin() + d.top_k);
    }
  } else {
    std::normal_distribution<float> b(0.0f, 0.1f);
    for (int e = 0; e < d.experts; ++e) l.bias.push_back(b(rng));
  }
  for (int e = 0; e < d.experts; ++e) {
    l.w1.push_back(random_fp4(rng, d.intermediate, d.hidden));
    l.w3.push_back(random_fp4(rng, d.intermediate, d.hidden));
    l.w2.push_back(random_fp4(rng, d.hidden, d.intermediate));
  }
  l.s1 = random_fp8(rng, d.intermediate, d.hidden);
  l.s3 = random_fp8(rng, d.intermediate, d.hidden);
  l.s2 = random_fp8(rng, d.hidden, d.intermediate);
  return l;
}

template <class T>
std::vector<std::uint8_t> raw_bytes(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A matrix's values as BF16 bytes (exact: E2M1 x 2^k and E4M3 x 2^k have <= 4 significant bits).
template <class M>
std::vector<std::uint8_t> bf16_of(const M& m) {
  std::vector<float> v;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) v.push_back(static_cast<float>(m.at(r, c)));
  return bf16_bytes(v);
}

// The tensors of layer N (owning their bytes) in one naming.
struct V4Tensors {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<TensorToWrite> tensors;
  void add(std::string name, StDtype dtype, std::vector<std::uint64_t> shape,
           std::vector<std::uint8_t> data) {
    bytes.push_back(std::move(data));
    tensors.push_back({std::move(name), dtype, std::move(shape), {}});
  }
  std::vector<TensorToWrite> views() const {
    std::vector<TensorToWrite> out = tensors;
    for (std::size_t i = 0; i < out.size(); ++i) out[i].data = bytes[i];
    return out;
  }
};

inline V4Tensors v4_tensors(const V4Dims& d, int n, const V4Layer& l, bool release) {
  const std::string p =
      (release ? "" : "model.") + std::string("layers.") + std::to_string(n) + ".ffn.";
  const int E = d.experts, H = d.hidden, I = d.intermediate;
  V4Tensors t;
  t.add(p + "gate.weight", StDtype::BF16, u64s({E, H}), bf16_bytes(l.router));
  if (l.hash)
    t.add(p + "gate.tid2eid", StDtype::I64, u64s({d.vocab, d.top_k}), raw_bytes(l.tid2eid));
  else
    t.add(p + "gate.bias", StDtype::F32, u64s({E}), raw_bytes(l.bias));
  const auto fp4 = [&](const std::string& name, const Fp4Matrix& m) {
    if (release) {
      t.add(name + ".weight", StDtype::I8, u64s({m.rows, m.cols / 2}), m.blocks);
      t.add(name + ".scale", StDtype::F8_E8M0, u64s({m.rows, m.cols / 32}), m.scales);
    } else {
      t.add(name + ".weight", StDtype::BF16, u64s({m.rows, m.cols}), bf16_of(m));
    }
  };
  for (int e = 0; e < E; ++e) {
    const std::string at = p + "experts." + std::to_string(e) + ".";
    fp4(at + "w1", l.w1[static_cast<std::size_t>(e)]);
    fp4(at + "w3", l.w3[static_cast<std::size_t>(e)]);
    fp4(at + "w2", l.w2[static_cast<std::size_t>(e)]);
  }
  const auto fp8 = [&](const std::string& name, const Fp8Matrix& m) {
    if (release) {
      t.add(name + ".weight", StDtype::F8_E4M3, u64s({m.rows, m.cols}), m.codes);
      t.add(name + ".scale", StDtype::F8_E8M0, u64s({(m.rows + 127) / 128, (m.cols + 127) / 128}),
            m.scales);
    } else {
      t.add(name + ".weight", StDtype::BF16, u64s({m.rows, m.cols}), bf16_of(m));
    }
  };
  fp8(p + "shared_experts.w1", l.s1);
  fp8(p + "shared_experts.w3", l.s3);
  fp8(p + "shared_experts.w2", l.s2);
  (void)I;
  return t;
}

inline nlohmann::json v4_config(const V4Dims& d, bool release) {
  nlohmann::json c = {{"architectures", {"DeepseekV4ForCausalLM"}},
                      {"model_type", "deepseek_v4"},
                      {"hidden_size", d.hidden},
                      {"moe_intermediate_size", d.intermediate},
                      {"n_routed_experts", d.experts},
                      {"n_shared_experts", 1},
                      {"num_experts_per_tok", d.top_k},
                      {"num_hidden_layers", d.layers},
                      {"vocab_size", d.vocab},
                      {"scoring_func", "sqrtsoftplus"},
                      {"norm_topk_prob", true},
                      {"routed_scaling_factor", 1.5},
                      {"swiglu_limit", 10.0},
                      {"hidden_act", "silu"},
                      {"torch_dtype", "bfloat16"},
                      {"head_dim", 512},
                      {"compress_ratios", {0, 0}}};
  if (release) {
    c["num_hash_layers"] = d.hash_layers;
    c["expert_dtype"] = "fp4";
    c["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
  } else {
    nlohmann::json types = nlohmann::json::array();
    for (int n = 0; n < d.layers; ++n) types.push_back(n < d.hash_layers ? "hash_moe" : "moe");
    c["mlp_layer_types"] = types;
  }
  return c;
}

// Writes DIR in one naming: one shard per layer and an index. Returns the layers.
inline std::vector<V4Layer> write_v4_checkpoint(const std::string& dir, const V4Dims& d,
                                                bool release, std::uint32_t seed = 70) {
  std::vector<V4Layer> layers;
  nlohmann::json map = nlohmann::json::object();
  for (int n = 0; n < d.layers; ++n) {
    layers.push_back(random_v4_layer(d, n < d.hash_layers, seed + static_cast<std::uint32_t>(n)));
    const V4Tensors t = v4_tensors(d, n, layers.back(), release);
    const std::string shard = "model-0000" + std::to_string(n + 1) + "-of-0000" +
                              std::to_string(d.layers) + ".safetensors";
    write_safetensors(dir + "/" + shard, t.views());
    for (const auto& tensor : t.tensors) map[tensor.name] = shard;
  }
  std::ofstream(dir + "/model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  write_config(dir, v4_config(d, release));
  return layers;
}

// float64 DeepSeek-V4 layer (transformers' DeepseekV4SparseMoeBlock): scores sqrt(softplus(W_r x));
// experts tid2eid[token] (hash) or the top-k of scores + bias (ties to the lower index);
// weights = chosen scores / their sum x 1.5; expert = w2 . (silu(min(g, 10)) * clamp(u, +-10));
// plus the shared expert with the same clamp.
inline std::vector<double> v4_reference(const V4Dims& d, const V4Layer& l,
                                        const std::vector<float>& x,
                                        const std::vector<std::int32_t>& token_ids, int tokens) {
  const int E = d.experts, H = d.hidden, I = d.intermediate, k = d.top_k;
  std::vector<double> y(static_cast<std::size_t>(tokens * H), 0.0);
  const auto expert = [&](const auto& w1, const auto& w3, const auto& w2, const float* xt,
                          double weight, double* yt) {
    std::vector<double> a(static_cast<std::size_t>(I));
    for (int i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int h = 0; h < H; ++h) {
        g += w1.at(i, h) * static_cast<double>(xt[h]);
        u += w3.at(i, h) * static_cast<double>(xt[h]);
      }
      g = std::min(g, 10.0);
      u = std::max(-10.0, std::min(u, 10.0));
      a[static_cast<std::size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int h = 0; h < H; ++h) {
      double s = 0;
      for (int i = 0; i < I; ++i) s += w2.at(h, i) * a[static_cast<std::size_t>(i)];
      yt[h] += weight * s;
    }
  };
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * H;
    std::vector<double> score(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) {
      double logit = 0;
      for (int h = 0; h < H; ++h)
        logit += static_cast<double>(l.router[static_cast<std::size_t>(e * H + h)]) *
                 static_cast<double>(xt[h]);
      score[static_cast<std::size_t>(e)] = std::sqrt(std::log1p(std::exp(logit)));
    }
    std::vector<int> chosen;
    if (l.hash) {
      for (int j = 0; j < k; ++j)
        chosen.push_back(static_cast<int>(
            l.tid2eid[static_cast<std::size_t>(token_ids[static_cast<std::size_t>(t)] * k + j)]));
    } else {
      std::vector<int> order(static_cast<std::size_t>(E));
      for (int e = 0; e < E; ++e) order[static_cast<std::size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return score[static_cast<std::size_t>(a)] + double{l.bias[static_cast<std::size_t>(a)]} >
               score[static_cast<std::size_t>(b)] + double{l.bias[static_cast<std::size_t>(b)]};
      });
      chosen.assign(order.begin(), order.begin() + k);
    }
    double sum = 0;
    for (int e : chosen) sum += score[static_cast<std::size_t>(e)];
    double* yt = y.data() + t * H;
    for (int e : chosen) {
      const auto u = static_cast<std::size_t>(e);
      expert(l.w1[u], l.w3[u], l.w2[u], xt, score[u] / sum * 1.5, yt);
    }
    expert(l.s1, l.s3, l.s2, xt, 1.0, yt);
  }
  return y;
}

}  // namespace mxmoe::testing_io
