// Fixtures of the io tests: temporary directories, raw safetensors bytes, a gpt-oss-layout
// checkpoint written by the test's own code, and float64 evaluations of MoE layers that
// do not share code with the library (own E2M1 table, own routing, own activations).
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace mxmoe::testing_io {

// A .npy of integers written here (not with the library): '<i4' or '<i8', shape (n,).
inline void write_int_npy(const std::filesystem::path& path, const std::vector<std::int64_t>& ids, bool int64) {
  std::string header = std::string("{'descr': '") + (int64 ? "<i8" : "<i4") +
                       "', 'fortran_order': False, 'shape': (" + std::to_string(ids.size()) +
                       ",), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xFF),
                       static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out << header;
  for (const std::int64_t v : ids) {
    if (int64) {
      out.write(reinterpret_cast<const char*>(&v), 8);
    } else {
      const auto v32 = static_cast<std::int32_t>(v);
      out.write(reinterpret_cast<const char*>(&v32), 4);
    }
  }
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mxmoe_io_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A raw safetensors image: u64 length + HEADER + DATA (no validation: for rejection tests).
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

inline std::uint16_t to_bf16(float v) {  // truncation is enough for fixtures (exact values)
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return static_cast<std::uint16_t>(b >> 16);
}
inline double from_bf16(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline std::vector<std::uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t h = to_bf16(v[i]);
    out[2 * i] = static_cast<std::uint8_t>(h & 0xFF);
    out[2 * i + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  return out;
}

// The E2M1 values of FORMATS.md §1, written out here on purpose (not the library's).
inline double e2m1(unsigned code) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8 ? -1 : 1) * kMag[code & 7];
}

// Dequantizes one [rows, cols] matrix m of an MXFP4 tensor pair (gpt-oss nibble order).
inline std::vector<double> dequant(const std::vector<std::uint8_t>& blocks,
                                   const std::vector<std::uint8_t>& scales, std::size_t m,
                                   std::size_t rows, std::size_t cols) {
  std::vector<double> out(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t row = m * rows + r;
      const std::uint8_t byte = blocks[row * cols / 2 + c / 2];
      const unsigned code = c % 2 == 0 ? byte & 0xF : byte >> 4;
      const int scale = scales[row * cols / 32 + c / 32];
      out[r * cols + c] = e2m1(code) * std::ldexp(1.0, scale - 127);
    }
  return out;
}

struct Dims {
  int experts = 4, top_k = 2, hidden = 64, intermediate = 96, layers = 2;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  // written to config.json
};

// One gpt-oss layer's tensors as written (router and biases BF16).
struct GptOssLayer {
  std::vector<float> router_w, router_b, b1, b2;  // exactly representable in BF16
  std::vector<std::uint8_t> w1_blocks, w1_scales, w2_blocks, w2_scales;
  std::vector<std::uint8_t> router_w_bytes, router_b_bytes, b1_bytes, b2_bytes;
};

inline std::vector<float> random_bf16_values(std::mt19937& rng, std::size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(from_bf16(to_bf16(d(rng))));
  return v;
}

inline GptOssLayer random_gpt_oss_layer(const Dims& d, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto E = static_cast<std::size_t>(d.experts), H = static_cast<std::size_t>(d.hidden),
             I = static_cast<std::size_t>(d.intermediate);
  GptOssLayer l;
  l.router_w = random_bf16_values(rng, E * H, 0.2f);
  l.router_b = random_bf16_values(rng, E, 0.5f);
  l.b1 = random_bf16_values(rng, E * 2 * I, 0.1f);
  l.b2 = random_bf16_values(rng, E * H, 0.1f);
  std::uniform_int_distribution<int> byte(0, 255), scale(119, 123);  // weights ~ 2^-6 .. 2^-2
  const auto fill = [&](std::vector<std::uint8_t>& v, std::size_t n, bool is_scale) {
    v.resize(n);
    for (auto& b : v) b = static_cast<std::uint8_t>(is_scale ? scale(rng) : byte(rng));
  };
  fill(l.w1_blocks, E * 2 * I * H / 2, false);
  fill(l.w1_scales, E * 2 * I * H / 32, true);
  fill(l.w2_blocks, E * H * I / 2, false);
  fill(l.w2_scales, E * H * I / 32, true);
  l.router_w_bytes = bf16_bytes(l.router_w);
  l.router_b_bytes = bf16_bytes(l.router_b);
  l.b1_bytes = bf16_bytes(l.b1);
  l.b2_bytes = bf16_bytes(l.b2);
  return l;
}

inline std::vector<std::uint64_t> u64s(std::initializer_list<int> v) {
  std::vector<std::uint64_t> out;
  for (int x : v) out.push_back(static_cast<std::uint64_t>(x));
  return out;
}

inline std::vector<TensorToWrite> gpt_oss_tensors(const Dims& d, int layer, const GptOssLayer& l) {
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  const int E = d.experts, H = d.hidden, I = d.intermediate;
  return {
      {p + "router.weight", StDtype::BF16, u64s({E, H}), l.router_w_bytes},
      {p + "router.bias", StDtype::BF16, u64s({E}), l.router_b_bytes},
      {p + "experts.gate_up_proj_blocks", StDtype::U8, u64s({E, 2 * I, H / 32, 16}), l.w1_blocks},
      {p + "experts.gate_up_proj_scales", StDtype::U8, u64s({E, 2 * I, H / 32}), l.w1_scales},
      {p + "experts.gate_up_proj_bias", StDtype::BF16, u64s({E, 2 * I}), l.b1_bytes},
      {p + "experts.down_proj_blocks", StDtype::U8, u64s({E, H, I / 32, 16}), l.w2_blocks},
      {p + "experts.down_proj_scales", StDtype::U8, u64s({E, H, I / 32}), l.w2_scales},
      {p + "experts.down_proj_bias", StDtype::BF16, u64s({E, H}), l.b2_bytes},
  };
}

inline nlohmann::json gpt_oss_config(const Dims& d) {
  return {{"architectures", {"GptOssForCausalLM"}},
          {"model_type", "gpt_oss"},
          {"num_local_experts", d.experts},
          {"num_experts_per_tok", d.top_k},
          {"experts_per_token", d.top_k},
          {"hidden_size", d.hidden},
          {"intermediate_size", d.intermediate},
          {"num_hidden_layers", d.layers},
          {"swiglu_limit", d.swiglu_limit},
          {"swiglu_alpha", d.swiglu_alpha},
          {"hidden_act", "silu"},
          {"torch_dtype", "bfloat16"},
          {"rope_theta", 150000},
          {"quantization_config",
           {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"model.layers.*.self_attn"}}}}};
}

inline void write_config(const std::string& dir, const nlohmann::json& config) {
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// Writes a gpt-oss checkpoint: one model.safetensors, or one shard per layer plus an index.
inline std::vector<GptOssLayer> write_gpt_oss_checkpoint(const std::string& dir, const Dims& d,
                                                         bool sharded, std::uint32_t seed = 7) {
  std::vector<GptOssLayer> layers;
  for (int n = 0; n < d.layers; ++n)
    layers.push_back(random_gpt_oss_layer(d, seed + static_cast<std::uint32_t>(n)));
  write_config(dir, gpt_oss_config(d));
  if (!sharded) {
    std::vector<TensorToWrite> all;
    for (int n = 0; n < d.layers; ++n)
      for (auto& t : gpt_oss_tensors(d, n, layers[static_cast<std::size_t>(n)])) all.push_back(t);
    write_safetensors(dir + "/model.safetensors", all, {{"format", "pt"}});
    return layers;
  }
  nlohmann::json map = nlohmann::json::object();
  for (int n = 0; n < d.layers; ++n) {
    const std::string shard = "model-0000" + std::to_string(n + 1) + "-of-0000" +
                              std::to_string(d.layers) + ".safetensors";
    const auto tensors = gpt_oss_tensors(d, n, layers[static_cast<std::size_t>(n)]);
    write_safetensors(dir + "/" + shard, tensors);
    for (const auto& t : tensors) map[t.name] = shard;
  }
  std::ofstream(dir + "/model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  return layers;
}

// float64 gpt-oss layer: top-k of the logits (ties: lower index), softmax over k,
// h = W1 x + b1, interleaved gate/up, swiglu_oai (d's alpha and limit), y = sum w (W2 a + b2).
inline std::vector<double> gpt_oss_reference(const Dims& d, const GptOssLayer& l,
                                             const std::vector<float>& x, int tokens) {
  const auto E = static_cast<std::size_t>(d.experts), H = static_cast<std::size_t>(d.hidden),
             I = static_cast<std::size_t>(d.intermediate);
  std::vector<std::vector<double>> w1(E), w2(E);
  for (std::size_t e = 0; e < E; ++e) {
    w1[e] = dequant(l.w1_blocks, l.w1_scales, e, 2 * I, H);
    w2[e] = dequant(l.w2_blocks, l.w2_scales, e, H, I);
  }
  std::vector<double> y(static_cast<std::size_t>(tokens) * H, 0.0);
  for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t) {
    const float* xt = x.data() + t * H;
    std::vector<std::pair<double, std::size_t>> logits(E);
    for (std::size_t e = 0; e < E; ++e) {
      double s = l.router_b[e];
      for (std::size_t h = 0; h < H; ++h)
        s += static_cast<double>(l.router_w[e * H + h]) * static_cast<double>(xt[h]);
      logits[e] = {s, e};
    }
    std::stable_sort(logits.begin(), logits.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    const auto k = static_cast<std::size_t>(d.top_k);
    double denom = 0;
    for (std::size_t j = 0; j < k; ++j) denom += std::exp(logits[j].first - logits[0].first);
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t e = logits[j].second;
      const double weight = std::exp(logits[j].first - logits[0].first) / denom;
      std::vector<double> a(I);
      for (std::size_t i = 0; i < I; ++i) {
        double g = l.b1[e * 2 * I + 2 * i], u = l.b1[e * 2 * I + 2 * i + 1];
        for (std::size_t h = 0; h < H; ++h) {
          const auto xh = static_cast<double>(xt[h]);
          g += w1[e][(2 * i) * H + h] * xh;
          u += w1[e][(2 * i + 1) * H + h] * xh;
        }
        g = std::min(g, d.swiglu_limit);
        u = std::clamp(u, -d.swiglu_limit, d.swiglu_limit);
        a[i] = g / (1.0 + std::exp(-d.swiglu_alpha * g)) * (u + 1.0);
      }
      for (std::size_t h = 0; h < H; ++h) {
        double s = l.b2[e * H + h];
        for (std::size_t i = 0; i < I; ++i) s += w2[e][h * I + i] * a[i];
        y[t * H + h] += weight * s;
      }
    }
  }
  return y;
}

inline double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = static_cast<double>(got[i]) - want[i];
    num += diff * diff;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

inline std::vector<float> random_input(int tokens, int hidden, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * hidden));
  for (auto& v : x) v = d(rng);
  return x;
}

// A BF16 Mixtral-style checkpoint (the input of `mxmoe quantize`): E, top-k, H, I, layers.
inline constexpr int kE = 4, kK = 2, kH = 64, kI = 96, kLayers = 2;

struct Bf16Expert {
  std::vector<float> gate, up, down;  // [I,H], [I,H], [H,I], BF16-exact values
};
struct Bf16Layer {
  std::vector<float> router;  // [E,H] stored as F32
  std::vector<Bf16Expert> experts;
};

// Writes a Mixtral-style checkpoint (HF v5 names: mlp.gate, mlp.experts.{e}.*_proj) of
// NUM_LAYERS layers; SEED draws the weights; a NaN goes into the last expert's gate of layer
// NAN_LAYER (-1: none).
inline std::vector<Bf16Layer> write_bf16_mixtral(const std::string& dir,
                                                 std::vector<std::vector<std::uint8_t>>& keep,
                                                 int num_layers = kLayers, std::uint32_t seed = 21,
                                                 int nan_layer = -1) {
  std::mt19937 rng(seed);
  std::vector<Bf16Layer> layers(static_cast<std::size_t>(num_layers));
  std::vector<TensorToWrite> tensors;
  keep.reserve(keep.size() + static_cast<std::size_t>(num_layers * (1 + 3 * kE)));
  const auto add = [&](const std::string& name, StDtype dtype, std::vector<std::uint64_t> shape,
                       std::vector<std::uint8_t> bytes) {
    keep.push_back(std::move(bytes));
    tensors.push_back({name, dtype, std::move(shape), keep.back()});
  };
  for (int n = 0; n < num_layers; ++n) {
    auto& l = layers[static_cast<std::size_t>(n)];
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.";
    l.router = random_bf16_values(rng, kE * kH, 0.2f);
    std::vector<std::uint8_t> router_bytes(l.router.size() * 4);
    std::memcpy(router_bytes.data(), l.router.data(), router_bytes.size());
    add(p + "gate.weight", StDtype::F32, u64s({kE, kH}), std::move(router_bytes));
    for (int e = 0; e < kE; ++e) {
      Bf16Expert x;
      x.gate = random_bf16_values(rng, kI * kH, 0.05f);
      if (n == nan_layer && e == kE - 1) x.gate[3] = std::nanf("");
      x.up = random_bf16_values(rng, kI * kH, 0.05f);
      x.down = random_bf16_values(rng, kH * kI, 0.05f);
      const std::string q = p + "experts." + std::to_string(e) + ".";
      add(q + "gate_proj.weight", StDtype::BF16, u64s({kI, kH}), bf16_bytes(x.gate));
      add(q + "up_proj.weight", StDtype::BF16, u64s({kI, kH}), bf16_bytes(x.up));
      add(q + "down_proj.weight", StDtype::BF16, u64s({kH, kI}), bf16_bytes(x.down));
      l.experts.push_back(std::move(x));
    }
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  write_config(dir, {{"model_type", "mixtral"},
                     {"num_local_experts", kE},
                     {"num_experts_per_tok", kK},
                     {"hidden_size", kH},
                     {"intermediate_size", kI},
                     {"num_hidden_layers", num_layers},
                     {"hidden_act", "silu"},
                     {"torch_dtype", "bfloat16"}});
  return layers;
}

// Every regular file under DIR (relative name -> bytes): a directory's exact state.
inline std::map<std::string, std::string> directory_snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      out[std::filesystem::relative(e.path(), dir).string()] = bytes.str();
    }
  return out;
}

// Entries of DIR with ".mxmoe-tmp-" in their name (temporaries left behind).
inline int temporaries_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().find(".mxmoe-tmp-") != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace mxmoe::testing_io
