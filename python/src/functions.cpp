// The module-level functions (the package's Python files wrap them with the public
// signatures): the oracle's judgement, checkpoint generation, the probe, the MXFP4 codecs and
// the registries' names.
#include <time.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bindings.hpp"
#include "edge.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/mxmoe.hpp"
#include "nb.hpp"

namespace mxmoe::python {
namespace {

// ---------------------------------------------------------------------------------------
// Module-level functions (the Python files wrap them with the public signatures).

LayerSpec spec_for(const std::optional<std::string>& preset_name,
                   const std::optional<std::string>& model_dir, int layer) {
  if (model_dir) return Checkpoint::open(*model_dir).layer_spec(layer);
  return preset(preset_name ? *preset_name : "gpt-oss-20b");
}

// Judges a deployment: (the explain report as JSON, the table, this selection's chosen name).
nb::tuple explain(const std::optional<std::string>& preset_name,
                  const std::optional<std::string>& model_dir, int layer,
                  const std::optional<std::string>& activation, bool batch_invariant,
                  const std::optional<std::string>& backend,
                  const std::vector<std::string>& exclude, int tokens, int threads,
                  const std::optional<std::string>& hardware_json,
                  const std::optional<std::string>& hardware_source) {
  const Request request =
      make_request(activation, batch_invariant, threads, backend, exclude, tokens);
  Hardware hw;
  if (hardware_source && !hardware_json) {
    hw = hardware_from_file(*hardware_source);  // a bad file is mxmoe.LoadError, as elsewhere
  } else if (hardware_json) {
    try {
      hw = hardware_from_json(*hardware_json);
    } catch (const std::invalid_argument& e) {
      throw nb::value_error((std::string("hardware: ") + e.what()).c_str());
    }
    if (hardware_source) hw.source = *hardware_source;
  } else {
    hw = probe();
  }
  const LayerSpec spec = spec_for(preset_name, model_dir, layer);
  const Selection s = judge(Deployment{spec, hw, request}, preferences_for(spec.family));
  return nb::make_tuple(explain_json(s), format_selection_table(s));
}

std::string generate(const std::string& out, const std::string& preset_name, int layers,
                     int experts, int top_k, int hidden, int intermediate, int hash_layers,
                     int vocab, std::uint64_t seed, bool force, bool full, int attention_heads,
                     int kv_heads, int head_dim) {
  const LayerSpec spec = resize(preset(preset_name), {experts, top_k, hidden, intermediate});
  GenerateOptions o;
  o.layers = layers;
  o.hash_layers = hash_layers;
  o.vocab = vocab;
  o.seed = seed;
  o.force = force;
  o.full = full;
  o.attention_heads = attention_heads;
  o.kv_heads = kv_heads;
  o.head_dim = head_dim;
  // Ctrl-C stops the writing between pieces (OUT left as it was) and raises KeyboardInterrupt.
  o.cancelled = [] {
    nb::gil_scoped_acquire gil;
    return PyErr_CheckSignals() != 0;
  };
  bool interrupted = false;
  {
    nb::gil_scoped_release release;
    try {
      generate_checkpoint(out, spec, o);
    } catch (const GenerateCancelled&) {
      interrupted = true;
    }
  }
  if (interrupted) throw nb::python_error();  // the error PyErr_CheckSignals set
  return out;
}

// MXFP4 codecs of the library (mxmoe/format.hpp) on numpy arrays, for writing checkpoints
// from Python. The package's wrappers pass C-contiguous float32 / uint8 arrays.
using F32Array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using U8Array = nb::ndarray<const std::uint8_t, nb::c_contig, nb::device::cpu>;

// A new zeroed buffer of SHAPE, handed to numpy by wrap() (which then owns it).
template <class T>
struct NewArray {
  explicit NewArray(std::vector<std::size_t> dims) : shape(std::move(dims)) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    data.reset(new T[n == 0 ? 1 : n]());
  }
  nb::object wrap() {
    nb::capsule owner(data.get(), [](void* p) noexcept { delete[] static_cast<T*>(p); });
    T* raw = data.release();
    return nb::ndarray<nb::numpy, T>(raw, shape.size(), shape.data(), owner).cast();
  }
  std::vector<std::size_t> shape;
  std::unique_ptr<T[]> data;
};

template <class Array>
std::vector<std::size_t> dims_of(const Array& a, std::size_t count) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(a.shape(i));
  return out;
}

nb::tuple quantize_mxfp4_py(F32Array w, const std::string& rule) {
  if (w.ndim() < 1 || w.shape(w.ndim() - 1) % kMxBlock != 0)
    throw nb::value_error("w: the last dimension must be a multiple of 32 (one MX block)");
  ScaleRule r = ScaleRule::round_up;
  if (rule == "floor")
    r = ScaleRule::floor;
  else if (rule != "round_up")
    throw nb::value_error(
        ("scale_rule: expected 'round_up' or 'floor', got '" + rule + "'").c_str());
  const std::vector<std::size_t> lead = dims_of(w, w.ndim() - 1);
  const std::size_t blocks = w.shape(w.ndim() - 1) / kMxBlock;
  std::vector<std::size_t> packed_shape = lead, scales_shape = lead;
  packed_shape.insert(packed_shape.end(), {blocks, kMxfp4BlockBytes});
  scales_shape.push_back(blocks);
  NewArray<std::uint8_t> packed(packed_shape), scales(scales_shape);
  const std::size_t n = w.size();
  {
    nb::gil_scoped_release release;
    quantize_mxfp4({w.data(), n}, r, {packed.data.get(), n / 2}, {scales.data.get(), n / kMxBlock});
  }
  return nb::make_tuple(packed.wrap(), scales.wrap());
}

nb::object dequantize_mxfp4_py(U8Array packed, U8Array scales) {
  const std::size_t nd = scales.ndim();
  bool ok = nd >= 1 && packed.ndim() == nd + 1 && packed.shape(nd) == kMxfp4BlockBytes;
  for (std::size_t i = 0; ok && i < nd; ++i) ok = packed.shape(i) == scales.shape(i);
  if (!ok)
    throw nb::value_error("blocks, scales: expected blocks [..., n, 16] and scales [..., n]");
  std::vector<std::size_t> shape;
  for (std::size_t i = 0; i < nd; ++i)
    shape.push_back(scales.shape(i) * (i + 1 == nd ? kMxBlock : 1));
  NewArray<float> out(shape);
  const std::size_t n = scales.size() * kMxBlock;
  const Mxfp4Decoder decoder = fastest_mxfp4_decoder(probe().isa);  // MXMOE_MAX_ISA holds
  {
    nb::gil_scoped_release release;
    dequantize_mxfp4_fast({packed.data(), n / 2}, {scales.data(), n / kMxBlock},
                          {out.data.get(), n}, decoder);
  }
  return out.wrap();
}

}  // namespace

void bind_functions(nb::module_& m) {
  using namespace nb::literals;
  m.def("_explain", &explain, "preset"_a, "model"_a, "layer"_a, "activation"_a, "batch_invariant"_a,
        "backend"_a, "exclude"_a, "tokens"_a, "threads"_a, "hardware_json"_a, "hardware_source"_a);
  m.def("_generate", &generate, "out"_a, "preset"_a, "layers"_a, "experts"_a, "top_k"_a, "hidden"_a,
        "intermediate"_a, "hash_layers"_a, "vocab"_a, "seed"_a, "force"_a, "full"_a,
        "attention_heads"_a, "kv_heads"_a, "head_dim"_a);
  m.def("_hardware_json", [] { return to_json(probe()); });
  m.def("_hardware_report", [](const std::string& hardware_json) {
    return format_hardware_report(hardware_from_json(hardware_json));
  });
  m.def("_quantize_mxfp4", &quantize_mxfp4_py, "w"_a, "scale_rule"_a);
  m.def("_dequantize_mxfp4", &dequantize_mxfp4_py, "blocks"_a, "scales"_a);
  m.def("_presets", [] { return preset_names(); });
  m.def("_backends", [] { return registered_backend_names(); });
}

}  // namespace mxmoe::python
