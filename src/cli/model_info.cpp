// `mxmoe info --model DIR [--json]`: what a checkpoint directory holds and what the layer
// loader finds in each layer (shapes and dtypes, without reading the weights), plus the
// cost of opening it and of fully loading (value-checking) the first MoE layer.
#include "cli/model_info.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mapped_reads.hpp"
#include "base/printable.hpp"
#include "cli/common.hpp"
#include "io/model_dir.hpp"
#include "mxmoe/checkpoint.hpp"
#include "perf/memory.hpp"

namespace mxmoe::cli {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string describe(const LayerSpec& s, const LayerWeights& w) {
  std::string text =
      fmt::format("MoE{}, MXFP4 experts [{} x {} x {}] + [{} x {} x {}], router {}",
                  s.routing == RoutingMethod::hash
                      ? fmt::format(" (hash-routed: tid2eid [{} x {}] {})", s.vocab, s.top_k,
                                    w.token_experts.int64 ? "I64" : "I32")
                      : "",
                  w.w1.experts, w.w1.rows, w.w1.cols, w.w2.experts, w.w2.rows, w.w2.cols,
                  w.router_weight.dtype == ElementType::bf16 ? "BF16" : "F32");
  if (s.router_bias) text += " + bias";
  if (s.routing_params.selection_bias) text += ", selection bias";
  if (s.expert_bias) text += ", expert biases";
  if (s.shared_experts > 0)
    text += fmt::format(", {} shared expert(s) in {}", s.shared_experts,
                        to_string(s.shared_weight_format));
  return text;
}

// The largest E8M0 scale byte of a projection (0xFF, NaN, is refused when loading).
int max_scale_byte(const Mxfp4View& v) {
  if (v.empty()) return 0;
  std::uint8_t most = 0;
  for (std::int64_t e = 0; e < v.experts; ++e)
    for (std::int64_t r = 0; r < v.rows; ++r) {
      const std::uint8_t* row = v.row_scale(e, r);
      for (std::int64_t k = 0; k < v.row_scales(); ++k)
        if (row[k] != 0xFF) most = std::max(most, row[k]);
    }
  return most;
}

// A warning when a dot product over K elements of unit-magnitude inputs, with weights up to
// 6 x 2^(scale - 127) (the largest E2M1 value times the largest scale), could exceed float32
// (about 2^128): such a layer can give Inf/NaN on legal inputs. "" when it cannot.
std::string overflow_warning(const char* projection, const Mxfp4View& v) {
  const int scale = max_scale_byte(v);
  if (v.empty()) return "";
  const double log2_reach = std::log2(6.0 * static_cast<double>(v.cols)) + (scale - 127);
  if (log2_reach < 128) return "";
  return fmt::format(
      "{} scales reach 2^{} (byte {}): a dot product over {} inputs of magnitude 1 can reach "
      "2^{:.1f}, beyond float32 (2^128); outputs may be Inf/NaN",
      projection, scale - 127, scale, v.cols, log2_reach);
}

std::vector<std::string> overflow_warnings(const LayerWeights& w) {
  std::vector<std::string> out;
  for (const auto& [name, view] : {std::pair{"gate_up_proj", &w.w1}, std::pair{"down_proj", &w.w2},
                                   std::pair{"shared gate_up_proj", &w.shared_w1},
                                   std::pair{"shared down_proj", &w.shared_w2}})
    if (std::string text = overflow_warning(name, *view); !text.empty()) out.push_back(text);
  return out;
}

// dtype -> (tensors, bytes) over every tensor of the checkpoint.
using FormatCounts = std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>;

FormatCounts count_formats(const io::ModelDir& model) {
  FormatCounts formats;
  for (const auto& [name, ref] : model.tensors.tensors()) {
    auto& f = formats[std::string(to_string(ref.info->dtype))];
    ++f.first;
    f.second += ref.info->bytes();
  }
  return formats;
}

// -1 when no layer is a MoE layer.
int first_moe_layer(const ModelConfig& c) {
  int first_moe = -1;
  for (int layer = 0; layer < c.num_layers && first_moe < 0; ++layer)
    if (c.non_moe_reason[static_cast<std::size_t>(layer)].empty()) first_moe = layer;
  return first_moe;
}

// The cost of opening the checkpoint: its time and the resident bytes it added.
struct OpenCost {
  double ms = 0;
  std::uint64_t resident = 0;
};

// Loading one layer with its value checks touches only that layer's bytes.
struct LayerLoad {
  double ms = 0;
  std::uint64_t resident = 0;
  bool ok = true;
  std::string error;  // what refused it
};

LayerLoad load_layer(const io::ModelDir& model, const std::vector<int>& slots, int layer) {
  LayerLoad load;
  const std::uint64_t rss0 = perf::resident_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    mapped_reads::read_guarded(slots, [&] { (void)model.bind(layer, /*check_values=*/true); });
  } catch (const LoadError& e) {
    load.error = e.what();
    load.ok = false;
  }
  load.ms = ms_since(t0);
  const std::uint64_t rss1 = perf::resident_bytes();
  load.resident = rss1 > rss0 ? rss1 - rss0 : 0;
  return load;
}

// Every layer's entry: a MoE layer's with its value checks (E8M0 scale 0xFF, NaN/Inf in
// dense tensors): a layer is "ok" only when it would load. Scales are 1/17 of the expert bytes.
struct LayerScan {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  std::vector<std::string> warnings;  // "layer N: ..."
  bool all_ok = true;
};

LayerScan scan_layers(const io::ModelDir& model, const std::vector<int>& slots) {
  const ModelConfig& c = model.config;
  LayerScan scan;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string& why = c.non_moe_reason[static_cast<std::size_t>(layer)];
    nlohmann::ordered_json entry = {{"layer", layer}};
    if (!why.empty()) {
      entry["status"] = "skipped";
      entry["found"] = why;
    } else {
      try {
        // The value scan reads the mapping: a shard that shrank is this layer's LoadError, and
        // nothing read from the zeros that replaced its bytes is reported.
        nlohmann::ordered_json found = {{"layer", layer}};
        std::vector<std::string> texts;
        mapped_reads::read_guarded(slots, [&] {
          const LayerWeights w = model.bind(layer, /*check_values=*/true);
          found["found"] = describe(c.spec_of(layer), w);
          found["routing"] = std::string(to_string(c.spec_of(layer).routing));
          found["status"] = "ok";
          texts = overflow_warnings(w);
        });
        entry = std::move(found);
        if (!texts.empty()) entry["warnings"] = texts;
        for (const std::string& text : texts)
          scan.warnings.push_back(fmt::format("layer {}: {}", layer, text));
      } catch (const LoadError& e) {
        entry["status"] = "error";
        entry["found"] = e.what();
        scan.all_ok = false;
      }
    }
    scan.layers.push_back(entry);
  }
  return scan;
}

// The document of --json (the text form prints from it too).
nlohmann::ordered_json info_json(const std::string& dir, const io::ModelDir& model,
                                 const FormatCounts& formats, const LayerScan& scan,
                                 const OpenCost& open, int first_moe, const LayerLoad& load) {
  const ModelConfig& c = model.config;
  const LayerSpec& s = c.moe;
  nlohmann::ordered_json out = {
      {"directory", dir},
      {"architecture", c.architecture},
      {"model_type", c.model_type},
      {"family", std::string(to_string(s.family))},
      {"experts", s.num_experts},
      {"top_k", s.top_k},
      {"hidden", s.hidden},
      {"intermediate", s.intermediate},
      {"shared_experts", s.shared_experts},
      {"layers", c.num_layers},
      {"quant_method", c.quant_method},
      {"gate_up_layout", std::string(to_string(s.gate_up_layout))},
      {"tensor_naming", model.layout == io::ModelDir::Layout::deepseek_v4
                            ? (model.v4_root.empty() ? "deepseek_v4 (release)"
                                                     : "deepseek_v4 (transformers save_pretrained)")
                            : "gpt_oss (Hugging Face)"},
      {"shared_weight_format", std::string(to_string(s.shared_weight_format))},
      {"hash_layers", std::count(c.hash_layer.begin(), c.hash_layer.end(), true)},
      {"shards", model.tensors.files().size()},
      {"sharded", model.tensors.sharded()},
      {"tensors", model.tensors.tensors().size()},
      {"tensor_bytes", model.tensors.tensor_bytes()},
  };
  nlohmann::ordered_json fmts = nlohmann::ordered_json::object();
  for (const auto& [dtype, nb] : formats)
    fmts[dtype] = {{"tensors", nb.first}, {"bytes", nb.second}};
  out["weight_formats"] = fmts;
  out["per_layer"] = scan.layers;
  out["warnings"] = scan.warnings;
  out["open_ms"] = open.ms;
  out["resident_after_open_bytes"] = open.resident;
  if (first_moe >= 0) {
    out["first_moe_layer"] = first_moe;
    out["first_moe_layer_load_ms"] = load.ms;
    out["first_moe_layer_resident_bytes"] = load.resident;
    if (!load.error.empty()) out["first_moe_layer_error"] = load.error;
  }
  return out;
}

// The text form of info_json's document.
void print_info(const std::string& dir, const io::ModelDir& model, const FormatCounts& formats,
                const nlohmann::ordered_json& out, int first_moe, const LayerLoad& load) {
  const ModelConfig& c = model.config;
  const LayerSpec& s = c.moe;
  cli::print("model        {} ({}; architecture {})\n", printable(dir), printable(c.model_type),
             c.architecture.empty() ? "-" : printable(c.architecture));
  cli::print("family       {}\n", to_string(s.family));
  cli::print("MoE layer    E={} top-k={} H={} I={}{} gate/up {}\n", s.num_experts, s.top_k,
             s.hidden, s.intermediate,
             s.shared_experts ? fmt::format(" shared={}", s.shared_experts) : "",
             to_string(s.gate_up_layout));
  cli::print("layers       {}{}\n", c.num_layers,
             out["hash_layers"].get<int>() > 0
                 ? fmt::format(" ({} hash-routed by token id)", out["hash_layers"].get<int>())
                 : "");
  cli::print("naming       {}\n", out["tensor_naming"].get<std::string>());
  cli::print("files        {} shard(s){}, {} tensors, {} bytes\n", model.tensors.files().size(),
             model.tensors.sharded() ? " via model.safetensors.index.json" : "",
             model.tensors.tensors().size(), model.tensors.tensor_bytes());
  std::string fmt_line;
  for (const auto& [dtype, nb] : formats)
    fmt_line += fmt::format("{}{} ({} tensors, {} bytes)", fmt_line.empty() ? "" : ", ", dtype,
                            nb.first, nb.second);
  cli::print("formats      {}\n", fmt_line);
  cli::print("open         {:.2f} ms, resident +{} KiB\n", out["open_ms"].get<double>(),
             out["resident_after_open_bytes"].get<std::uint64_t>() / 1024);
  if (first_moe >= 0)
    cli::print("load layer {} {:.2f} ms with value checks, resident +{} KiB{}\n", first_moe,
               load.ms, load.resident / 1024, load.error.empty() ? "" : ": " + load.error);
  for (const auto& l : out["per_layer"]) {
    cli::print("  layer {:>3}  {:<7} {}\n", l["layer"].get<int>(), l["status"].get<std::string>(),
               l["found"].get<std::string>());
    if (l.contains("warnings"))
      for (const auto& w : l["warnings"])
        cli::print("             warning: {}\n", w.get<std::string>());
  }
}

}  // namespace

int info_model(const std::string& dir, bool json, const std::string* hardware_json) {
  const std::uint64_t rss_before = perf::resident_bytes();
  const auto t_open = std::chrono::steady_clock::now();
  const io::ModelDir model = io::ModelDir::open(dir);
  const std::vector<int> slots = model.tensors.mapped_slots();  // base/mapped_reads.hpp
  OpenCost open;
  open.ms = ms_since(t_open);
  const std::uint64_t rss_open = perf::resident_bytes();
  open.resident = rss_open > rss_before ? rss_open - rss_before : 0;

  const FormatCounts formats = count_formats(model);
  const int first_moe = first_moe_layer(model.config);
  const LayerLoad load = first_moe >= 0 ? load_layer(model, slots, first_moe) : LayerLoad{};
  const LayerScan scan = scan_layers(model, slots);
  for (const std::string& text : scan.warnings) cli::print(stderr, "mxmoe: warning: {}\n", text);
  const bool all_ok = load.ok && scan.all_ok;

  nlohmann::ordered_json out = info_json(dir, model, formats, scan, open, first_moe, load);
  if (json) {
    if (hardware_json != nullptr) out["hardware"] = nlohmann::ordered_json::parse(*hardware_json);
    cli::print("{}\n", out.dump(2));
  } else {
    print_info(dir, model, formats, out, first_moe, load);
  }
  return all_ok ? kExitOk : kExitError;
}

}  // namespace mxmoe::cli
