// mxmoe._mxmoe: the Python bindings of the C++ API (include/mxmoe/). Every call goes through
// the same C++ entry points an engine uses; compute runs with the GIL released; no C++
// exception escapes except as a Python exception (translate() below, and nanobind's own
// translation of the standard exceptions). The package's
// Python files (python/mxmoe/) build the user-facing API on top (docs/PYTHON.md).
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

#include "arrays.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/mxmoe.h"
#include "mxmoe/mxmoe.hpp"
#include "nb.hpp"

namespace mxmoe::python {
namespace {

// ---------------------------------------------------------------------------------------
// Errors: mxmoe.NoBackendError (with .selection, the explain report as a dict) and
// mxmoe.LoadError (an OSError) and mxmoe.NumericError (a ValueError: an output holding NaN/Inf)
// are made here; std::invalid_argument is ValueError.

struct ErrorTypes {
  PyObject* no_backend = nullptr;
  PyObject* load = nullptr;
  PyObject* numeric = nullptr;
};
ErrorTypes& error_types() {
  static ErrorTypes types;  // set once at import; read by the translator
  return types;
}

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Interrupted&) {
    // interrupt_requested() below left the handler's exception (KeyboardInterrupt) set.
    if (PyErr_Occurred() == nullptr) PyErr_SetNone(PyExc_KeyboardInterrupt);
  } catch (const NoBackendError& e) {
    nb::object error =
        nb::steal(PyObject_CallOneArg(error_types().no_backend, nb::str(e.what()).ptr()));
    if (!error.is_valid()) return;  // the call set its own error
    error.attr("selection") = json_loads(explain_json(e.selection()));
    PyErr_SetObject(error_types().no_backend, error.ptr());
  } catch (const LoadError& e) {
    PyErr_SetString(error_types().load, e.what());
  } catch (const NumericError& e) {
    PyErr_SetString(error_types().numeric, e.what());
  } catch (const std::system_error& e) {
    PyErr_SetString(PyExc_OSError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  }
}

// ---------------------------------------------------------------------------------------
// The process's runtimes: one per thread count, shared by every layer that asks for it
// (mxmoe::Runtime is the one pool of its layers), released with the last of them.

void check_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw nb::value_error(("threads: expected 0 (every logical CPU) or 1.." +
                           std::to_string(kMaxThreads) + ", got " + std::to_string(threads))
                              .c_str());
}

// The thread that runs Python's signal handlers (the main thread), read at import.
unsigned long& main_thread_ident() {
  static unsigned long ident = 0;  // set once at import
  return ident;
}

// Ctrl-C during a layer call, polled by the runtime between units of work with the GIL
// released (Runtime::set_interrupt_check). On the main thread, the only one Python runs signal
// handlers on, the handlers run: SIGINT's raises KeyboardInterrupt, which stays set (so every
// later poll of the call answers true) until the call has stopped and translate() raises it.
// No other thread takes the GIL here.
bool interrupt_requested() {
  if (PyThread_get_thread_ident() != main_thread_ident()) return false;
  nb::gil_scoped_acquire gil;
  return PyErr_Occurred() != nullptr || PyErr_CheckSignals() != 0;
}

std::shared_ptr<Runtime> shared_runtime(int threads) {
  check_threads(threads);
  if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<Runtime>> runtimes;
  std::lock_guard lock(mutex);
  std::shared_ptr<Runtime> r = runtimes[threads].lock();
  if (!r) {
    r = std::make_shared<Runtime>(threads);
    r->set_interrupt_check(interrupt_requested);
    runtimes[threads] = r;
  }
  return r;
}

// The edge: this machine's probe, capped by MXMOE_MAX_ISA (as the CLI and the C API do).
Hardware probe() {
  return probe_hardware_from_environment();
}

Request make_request(const std::optional<std::string>& activation, bool batch_invariant,
                     int threads, const std::optional<std::string>& backend,
                     const std::vector<std::string>& exclude, int tokens) {
  // The MXMOE_* variables through the library's one parser (config.hpp), as the command and
  // the C API read them: an argument left at its default takes the variable, one given wins.
  // MXMOE_VERBOSE=dispatch turns the dispatch log on for the judgement that follows.
  const EnvironmentConfig config = config_from_environment();
  apply_log_settings(config);
  Request r = config.request;
  if (activation) {
    try {
      r.activation = parse_activation_format(*activation);
    } catch (const std::invalid_argument& e) {
      throw nb::value_error((std::string("activation: ") + e.what()).c_str());
    }
  }
  if (batch_invariant) r.batch_invariant = true;
  check_threads(threads);
  if (threads != 0) r.threads = threads;
  if (tokens < 1 || tokens > kMaxTokensPerCall)
    throw nb::value_error(("tokens: expected 1.." + std::to_string(kMaxTokensPerCall) + ", got " +
                           std::to_string(tokens))
                              .c_str());
  r.tokens_hint = tokens;
  if (backend) r.forced_backend = *backend;
  if (!exclude.empty()) r.excluded_backends = exclude;
  return r;
}

// ---------------------------------------------------------------------------------------
// Model and Layer.

struct ModelState {
  ModelState(const std::string& dir, std::shared_ptr<Runtime> rt)
      : runtime(std::move(rt)), model(dir, probe(), *runtime) {}
  std::shared_ptr<Runtime> runtime;  // before model: destroyed after it
  Model model;
};

struct PyLayer {
  PyLayer(std::shared_ptr<ModelState> m, std::shared_ptr<Runtime> rt, MoeLayer l, int i)
      : model(std::move(m)), runtime(std::move(rt)), layer(std::move(l)), index(i) {}
  std::shared_ptr<ModelState> model;  // the mapping the layer reads (null: a layer from tensors)
  // A layer from tensors whose backend computes from the caller's arrays keeps them alive; one
  // whose backend packed its own copy holds none, so the caller can free them.
  std::vector<WeightArray> sources;
  std::shared_ptr<Runtime> runtime;
  MoeLayer layer;
  int index;  // in the checkpoint; -1 for a layer from tensors
  // One call at a time per layer (its workspace is its own): a second Python thread waits
  // here, without the GIL. The scratch buffers below belong to the call holding it.
  std::mutex mutex;
  std::vector<std::byte> x_scratch, weights_scratch, ids_scratch, token_scratch;
  std::vector<std::int32_t> ids32, token_ids32;
};

class PyModel {
 public:
  explicit PyModel(const std::string& dir) {
    std::shared_ptr<Runtime> runtime = shared_runtime(0);
    nb::gil_scoped_release release;
    state_ = std::make_shared<ModelState>(dir, std::move(runtime));
  }

  std::unique_ptr<PyLayer> bind(int index, const std::optional<std::string>& activation,
                                bool batch_invariant, int threads,
                                const std::optional<std::string>& backend,
                                const std::vector<std::string>& exclude, int tokens) {
    Request request = make_request(activation, batch_invariant, threads, backend, exclude, tokens);
    std::shared_ptr<Runtime> runtime =
        request.threads == 0 ? state_->runtime : shared_runtime(request.threads);
    request.threads = runtime->threads();
    nb::gil_scoped_release release;
    MoeLayer layer = state_->model.bind(index, request);
    layer.set_runtime(*runtime);
    return std::make_unique<PyLayer>(state_, std::move(runtime), std::move(layer), index);
  }

  const Model& model() const { return state_->model; }

 private:
  std::shared_ptr<ModelState> state_;
};

Expect x_expect(const PyLayer& l) {
  return {"x",      {Element::f32, Element::bf16, Element::bf16_bits},
          -1,       l.layer.spec().hidden,
          "tokens", "hidden"};
}

// A hash layer's token ids [tokens], int32 or int64 (narrowed: a value outside int32 would
// otherwise wrap into a valid id); the layer checks [0, vocab) and names the token.
const std::int32_t* token_ids_as_int32(const Matrix& ids, PyLayer& self) {
  const std::byte* p = contiguous_bytes(ids, self.token_scratch);
  if (ids.element == Element::i32) return reinterpret_cast<const std::int32_t*>(p);
  const auto n = static_cast<std::size_t>(ids.rows);
  self.token_ids32.resize(n);
  const auto* wide = reinterpret_cast<const std::int64_t*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (wide[i] < 0 || wide[i] > std::numeric_limits<std::int32_t>::max())
      throw std::invalid_argument("token_ids[" + std::to_string(i) + "] = " +
                                  std::to_string(wide[i]) + " is not a token id (0..2^31 - 1)");
    self.token_ids32[i] = static_cast<std::int32_t>(wide[i]);
  }
  return self.token_ids32.data();
}

// x as a layer call reads it: its rows within the bound of every call (require_call_tokens),
// checked before anything is sized from them.
Matrix read_x(PyLayer& self, nb::handle x_obj, bool bf16_bits) {
  Matrix x = read_matrix(x_obj, x_expect(self), bf16_bits);
  require_call_tokens("x", x.rows, self.layer.spec().top_k);
  return x;
}

// The edges' contract on the output (mxmoe/edge_checks.hpp): NaN/Inf is a NumericError
// (mxmoe.NumericError) naming the count and the tokens, as the C API and the command line say.
void require_finite(const Result& y, const Matrix& x) {
  if (x.element == Element::f32)
    require_finite_output("the output", reinterpret_cast<const float*>(y.data()), x.rows, x.cols);
  else
    require_finite_output("the output", reinterpret_cast<const std::uint16_t*>(y.data()), x.rows,
                          x.cols);
}

nb::object forward(PyLayer& self, nb::handle x_obj, nb::handle out, bool bf16_bits,
                   nb::handle token_ids_obj) {
  const Matrix x = read_x(self, x_obj, bf16_bits);
  std::optional<Matrix> ids;
  if (!token_ids_obj.is_none())
    ids = read_matrix(token_ids_obj,
                      {"token_ids", {Element::i32, Element::i64}, x.rows, 0, "tokens", ""});
  const ArrayBytes inputs[] = {bytes_of(x, "x"),
                               ids ? bytes_of(*ids, "token_ids") : ArrayBytes{"token_ids", {}, {}}};
  Result y(out, x, x.cols, inputs);
  if (x.rows > 0) {
    nb::gil_scoped_release release;
    std::lock_guard lock(self.mutex);
    const std::byte* xp = contiguous_bytes(x, self.x_scratch);
    const std::int32_t* tp = ids ? token_ids_as_int32(*ids, self) : nullptr;
    if (x.element == Element::f32)
      self.layer.forward(reinterpret_cast<const float*>(xp), tp, x.rows,
                         reinterpret_cast<float*>(y.data()));
    else
      self.layer.forward_bf16(reinterpret_cast<const std::uint16_t*>(xp), tp, x.rows,
                              reinterpret_cast<std::uint16_t*>(y.data()));
    require_finite(y, x);
  }
  return y.finish();
}

// int64 ids narrowed to int32; a value outside int32 would otherwise wrap into a valid id.
const std::int32_t* ids_as_int32(const Matrix& ids, PyLayer& self) {
  const std::byte* p = contiguous_bytes(ids, self.ids_scratch);
  if (ids.element == Element::i32) return reinterpret_cast<const std::int32_t*>(p);
  const auto n = static_cast<std::size_t>(ids.rows * ids.cols);
  self.ids32.resize(n);
  const auto* wide = reinterpret_cast<const std::int64_t*>(p);
  const int experts = self.layer.spec().num_experts;
  for (std::size_t i = 0; i < n; ++i) {
    if (wide[i] < 0 || wide[i] >= experts)
      throw std::invalid_argument(
          "topk_ids[" + std::to_string(i / static_cast<std::size_t>(ids.cols)) + ", " +
          std::to_string(i % static_cast<std::size_t>(ids.cols)) +
          "] = " + std::to_string(wide[i]) + " is not an expert of this layer (0.." +
          std::to_string(experts - 1) + ")");
    self.ids32[i] = static_cast<std::int32_t>(wide[i]);
  }
  return self.ids32.data();
}

nb::object forward_routed(PyLayer& self, nb::handle x_obj, nb::handle ids_obj,
                          nb::handle weights_obj, nb::handle out, bool bf16_bits) {
  const Matrix x = read_x(self, x_obj, bf16_bits);
  const int k = self.layer.spec().top_k;
  const Matrix ids = read_matrix(
      ids_obj, {"topk_ids", {Element::i32, Element::i64}, x.rows, k, "tokens", "top_k"});
  const Matrix weights =
      read_matrix(weights_obj, {"topk_weights", {Element::f32}, x.rows, k, "tokens", "top_k"});
  const ArrayBytes inputs[] = {bytes_of(x, "x"), bytes_of(ids, "topk_ids"),
                               bytes_of(weights, "topk_weights")};
  Result y(out, x, x.cols, inputs);
  if (x.rows > 0) {
    nb::gil_scoped_release release;
    std::lock_guard lock(self.mutex);
    const std::byte* xp = contiguous_bytes(x, self.x_scratch);
    const std::int32_t* idp = ids_as_int32(ids, self);
    const auto* wp =
        reinterpret_cast<const float*>(contiguous_bytes(weights, self.weights_scratch));
    if (x.element == Element::f32)
      self.layer.forward_routed(reinterpret_cast<const float*>(xp), idp, wp, x.rows,
                                reinterpret_cast<float*>(y.data()));
    else
      self.layer.forward_routed_bf16(reinterpret_cast<const std::uint16_t*>(xp), idp, wp, x.rows,
                                     reinterpret_cast<std::uint16_t*>(y.data()));
    require_finite(y, x);
  }
  return y.finish();
}

// The C++ call alone, repeated in C++ with the GIL released, for bench/python: the per-call
// cost of Python minus this is the bindings' overhead. x and out: contiguous float32.
// The C++ call alone, repeated in C++ with the GIL released, for bench/python: the per-call
// cost of Python minus this is the bindings' overhead. Returns (wall seconds, CPU seconds of
// the calling thread); on a loaded machine the thread's CPU time is the steadier measure of a
// one-thread layer's work. x and out: contiguous float32.
nb::tuple time_cpp_forward(PyLayer& self, nb::handle x_obj, nb::handle out, int iterations) {
  const Matrix x =
      read_matrix(x_obj, {"x", {Element::f32}, -1, self.layer.spec().hidden, "tokens", "hidden"});
  if (!x.contiguous()) throw nb::value_error("x: expected a C-contiguous array");
  const ArrayBytes inputs[] = {bytes_of(x, "x")};
  Result y(out, x, x.cols, inputs);
  double wall = 0, cpu = 0;
  {
    nb::gil_scoped_release release;
    std::lock_guard lock(self.mutex);
    const auto thread_cpu = [] {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
    };
    const double c0 = thread_cpu();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      self.layer.forward(reinterpret_cast<const float*>(x.data), x.rows,
                         reinterpret_cast<float*>(y.data()));
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu = thread_cpu() - c0;
  }
  return nb::make_tuple(wall, cpu);
}

std::string layer_repr(const PyLayer& l) {
  const LayerSpec& s = l.layer.spec();
  const Request& r = l.layer.selection().deployment.request;
  std::ostringstream out;
  if (l.model)
    out << "<mxmoe.Layer " << l.index << " of " << l.model->model.checkpoint().dir() << ": ";
  else
    out << "<mxmoe.Layer from tensors: ";
  out << to_string(s.family) << " E=" << s.num_experts << " top-" << s.top_k << " H=" << s.hidden
      << " I=" << s.intermediate << "; backend " << l.layer.selection().chosen << ", "
      << (r.activation ? to_string(*r.activation) : "default") << " activations"
      << (r.batch_invariant ? ", batch-invariant" : "") << ", " << l.layer.threads()
      << " thread(s)>";
  return out.str();
}

// ---------------------------------------------------------------------------------------
// A layer from tensors (mxmoe.layer_from_tensors wraps this with the public signature).

template <class Parse>
auto parse_argument(const char* argument, const std::string& value, Parse parse) {
  try {
    return parse(value);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error((std::string(argument) + ": " + e.what()).c_str());
  }
}

// OBJ as a list of per-expert tensors (None: empty).
std::vector<WeightArray> read_weight_list(nb::handle obj, const char* name) {
  std::vector<WeightArray> out;
  if (obj.is_none()) return out;
  if (!nb::isinstance<nb::list>(obj) && !nb::isinstance<nb::tuple>(obj))
    throw nb::type_error((std::string(name) +
                          ": expected a list of per-expert arrays (the per-expert layout), got " +
                          nb::type_name(obj.type()).c_str())
                             .c_str());
  std::size_t e = 0;
  for (nb::handle item : obj)
    out.push_back(read_weight(item, std::string(name) + "[" + std::to_string(e++) + "]", true));
  return out;
}

// MATH[key] as a T, or unset when absent or None (the package's wrapper checked the types).
template <class T>
std::optional<T> math_value(nb::dict math, const char* key) {
  if (!math.contains(key) || math[key].is_none()) return std::nullopt;
  return nb::cast<T>(math[key]);
}

// TENSORS: the arrays by argument name (None: not given); MATH: the overrides of the family's
// math by argument name (mxmoe.layer_from_tensors passes both).
std::unique_ptr<PyLayer> layer_from_tensors_py(const std::string& family, int top_k,
                                               nb::dict tensors, nb::dict math,
                                               const std::optional<std::string>& activation,
                                               bool batch_invariant, int threads,
                                               const std::optional<std::string>& backend,
                                               const std::vector<std::string>& exclude,
                                               int tokens) {
  const auto text = [&](const char* key, auto parse) {
    const auto v = math_value<std::string>(math, key);
    return v ? std::optional(parse_argument(key, *v, parse)) : std::nullopt;
  };
  MathOverrides o;
  o.activation = text("activation_fn", parse_activation_fn);
  o.alpha = math_value<float>(math, "alpha");
  o.limit = math_value<float>(math, "limit");
  o.routing = text("routing", parse_routing_method);
  o.renormalize = math_value<bool>(math, "renormalize");
  o.routed_scaling_factor = math_value<float>(math, "routed_scaling_factor");
  o.n_group = math_value<int>(math, "n_group");
  o.topk_group = math_value<int>(math, "topk_group");
  o.gate_up = text("gate_up", parse_gate_up_layout);
  o.expert_bias = math_value<bool>(math, "expert_bias");
  LayerSpec spec_math = family_math(parse_argument("family", family, parse_family), o);
  spec_math.top_k = top_k;
  const auto arg = [&](const char* key) {
    return tensors.contains(key) ? nb::handle(tensors[key]) : nb::handle(Py_None);
  };
  // Every array read in place (the GIL held); the tensors point into them.
  std::vector<WeightArray> arrays;
  LayerTensors t;
  const auto one = [&](nb::handle obj, const char* name, bool bytes, HostTensor& into) {
    if (obj.is_none()) return;
    arrays.push_back(read_weight(obj, name, bytes));
    into = arrays.back().tensor;
  };
  const auto list = [&](nb::handle obj, const char* name, std::vector<HostTensor>& into) {
    for (WeightArray& w : read_weight_list(obj, name)) {
      into.push_back(w.tensor);
      arrays.push_back(std::move(w));
    }
  };
  // A list for w2 is the per-expert layout's (as w1 and w3 always are).
  const bool per_expert_w2 =
      nb::isinstance<nb::list>(arg("w2_blocks")) || nb::isinstance<nb::tuple>(arg("w2_blocks"));
  one(arg("w13_blocks"), "w13_blocks", true, t.w13_blocks);
  one(arg("w13_scales"), "w13_scales", true, t.w13_scales);
  if (per_expert_w2) {
    list(arg("w2_blocks"), "w2_blocks", t.per_expert.w2_blocks);
    list(arg("w2_scales"), "w2_scales", t.per_expert.w2_scales);
  } else {
    one(arg("w2_blocks"), "w2_blocks", true, t.w2_blocks);
    one(arg("w2_scales"), "w2_scales", true, t.w2_scales);
  }
  list(arg("w1_blocks"), "w1_blocks", t.per_expert.w1_blocks);
  list(arg("w1_scales"), "w1_scales", t.per_expert.w1_scales);
  list(arg("w3_blocks"), "w3_blocks", t.per_expert.w3_blocks);
  list(arg("w3_scales"), "w3_scales", t.per_expert.w3_scales);
  for (const auto& [key, into] :
       {std::pair{"w13_bias", &t.w13_bias}, std::pair{"w2_bias", &t.w2_bias},
        std::pair{"router_weight", &t.router_weight}, std::pair{"router_bias", &t.router_bias},
        std::pair{"selection_bias", &t.selection_bias}})
    one(arg(key), key, false, *into);

  Request request = make_request(activation, batch_invariant, threads, backend, exclude, tokens);
  std::shared_ptr<Runtime> runtime = shared_runtime(request.threads);
  request.threads = runtime->threads();
  std::optional<MoeLayer> layer;
  {
    nb::gil_scoped_release release;
    const TensorLayer from = layer_from_tensors(spec_math, t);
    layer.emplace(make_layer(from.spec, from.weights, probe(), request, *runtime));
  }
  auto out = std::make_unique<PyLayer>(nullptr, std::move(runtime), std::move(*layer), -1);
  if (out->layer.reads_weight_views()) out->sources = std::move(arrays);
  return out;
}

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
}  // namespace mxmoe::python

NB_MODULE(_mxmoe, m) {
  using namespace mxmoe;
  using namespace mxmoe::python;
  using namespace nb::literals;

  m.doc() = "The C++ core of the mxmoe package (use the package mxmoe, documented there).";
  m.attr("__version__") = mxmoe_version();

  ErrorTypes& types = error_types();
  types.no_backend = PyErr_NewExceptionWithDoc(
      "mxmoe.NoBackendError",
      "No backend supports the deployment. str(e) is the whole report (every backend with "
      "every reason, and the single changes that would make one fit); e.selection is the "
      "same report as a dict (the keys of mxmoe.explain()).",
      PyExc_Exception, nullptr);
  types.load = PyErr_NewExceptionWithDoc(
      "mxmoe.LoadError",
      "A checkpoint is missing, unreadable or malformed (an OSError): the message names the "
      "file, the tensor and the numbers.",
      PyExc_OSError, nullptr);
  types.numeric = PyErr_NewExceptionWithDoc(
      "mxmoe.NumericError",
      "A layer call's output holds NaN/Inf (a ValueError): a legal checkpoint can overflow "
      "float32 (an E8M0 scale of 254), so can routing weights near the float range. The "
      "message names the count and the tokens, as the C API (MXMOE_ERROR_NON_FINITE) and the "
      "command line (exit 1) do; `out`, when given, holds what was computed.",
      PyExc_ValueError, nullptr);
  if (types.no_backend == nullptr || types.load == nullptr || types.numeric == nullptr)
    throw nb::python_error();
  m.attr("NoBackendError") = nb::handle(types.no_backend);
  m.attr("LoadError") = nb::handle(types.load);
  m.attr("NumericError") = nb::handle(types.numeric);
  main_thread_ident() = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  nb::register_exception_translator(translate);

  nb::class_<PyLayer>(m, "Layer",
                      "One MoE layer bound to its checkpoint's weights and the backend the oracle "
                      "chose (see mxmoe.Model.layer).")
      .def("__call__", &forward, "x"_a.none(), "out"_a = nb::none(), nb::kw_only(),
           "bf16_bits"_a = false, "token_ids"_a = nb::none(), "Same as forward().")
      .def("forward", &forward, "x"_a.none(), "out"_a = nb::none(), nb::kw_only(),
           "bf16_bits"_a = false, "token_ids"_a = nb::none(),
           "y = the layer's output for x [tokens, hidden], routed by the layer's own router; "
           "a hash-routed layer (DeepSeek-V4's first layers) needs token_ids [tokens] int32 or "
           "int64, which other layers ignore.")
      .def_prop_ro("vocab",
                   [](const PyLayer& l) {
                     return l.layer.spec().routing == RoutingMethod::hash ? l.layer.spec().vocab
                                                                          : 0;
                   })
      .def("forward_routed", &forward_routed, "x"_a.none(), "topk_ids"_a.none(),
           "topk_weights"_a.none(), "out"_a = nb::none(), nb::kw_only(), "bf16_bits"_a = false,
           "y = the layer's output for x with the routing given: topk_ids [tokens, top_k] int32 "
           "or int64, topk_weights [tokens, top_k] float32.")
      .def("_time_cpp_forward", &time_cpp_forward, "x"_a, "out"_a, "iterations"_a,
           "(wall, thread CPU) seconds of ITERATIONS calls of the C++ forward alone.")
      .def_prop_ro(
          "selection",
          [](const PyLayer& l) { return json_loads(explain_json(l.layer.selection())); },
          "The oracle's report for this layer (the keys of mxmoe.explain()).")
      .def_prop_ro(
          "spec", [](const PyLayer& l) { return json_loads(to_json(l.layer.spec())); },
          "The layer's shape and math (LayerSpec) as a dict.")
      .def_prop_ro(
          "backend", [](const PyLayer& l) { return l.layer.selection().chosen; },
          "The backend that runs this layer.")
      .def_prop_ro(
          "activation",
          [](const PyLayer& l) {
            return std::string(to_string(*l.layer.selection().deployment.request.activation));
          },
          "The format activations are rounded to before each expert GEMM.")
      .def_prop_ro(
          "batch_invariant",
          [](const PyLayer& l) { return l.layer.selection().deployment.request.batch_invariant; },
          "Whether each token's output bits are independent of the batch.")
      .def_prop_ro(
          "index", [](const PyLayer& l) { return l.index < 0 ? std::optional<int>() : l.index; },
          "The layer's index in its checkpoint (None for a layer from tensors).")
      .def_prop_ro(
          "reads_source_weights", [](const PyLayer& l) { return l.layer.reads_weight_views(); },
          "Whether the layer reads the weights it was made from while it computes (the "
          "reference backend, a hash-routed layer): a layer from tensors then keeps the arrays "
          "alive itself. False: the backend packed its own copy and holds no reference to them.")
      .def_static(
          "from_tensors",
          [](nb::args args, nb::kwargs kwargs) {
            return nb::module_::import_("mxmoe").attr("layer_from_tensors")(*args, **kwargs);
          },
          "The same as mxmoe.layer_from_tensors().")
      .def_prop_ro("hidden", [](const PyLayer& l) { return l.layer.spec().hidden; })
      .def_prop_ro("intermediate", [](const PyLayer& l) { return l.layer.spec().intermediate; })
      .def_prop_ro("num_experts", [](const PyLayer& l) { return l.layer.spec().num_experts; })
      .def_prop_ro("top_k", [](const PyLayer& l) { return l.layer.spec().top_k; })
      .def_prop_ro(
          "threads", [](const PyLayer& l) { return l.layer.threads(); },
          "Threads of the runtime (thread pool) the layer computes on.")
      .def_prop_ro(
          "packed_weight_bytes", [](const PyLayer& l) { return l.layer.packed_weight_bytes(); },
          "Bytes the backend packed for this layer (0 when it reads the mapping).")
      .def("__repr__", &layer_repr);

  nb::class_<PyModel>(m, "_Model")
      .def(nb::init<const std::string&>(), "path"_a)
      .def("bind", &PyModel::bind, "index"_a, "activation"_a, "batch_invariant"_a, "threads"_a,
           "backend"_a, "exclude"_a, "tokens"_a)
      .def_prop_ro("config_json",
                   [](const PyModel& p) { return p.model().checkpoint().config_json(); })
      .def_prop_ro("dir", [](const PyModel& p) { return p.model().checkpoint().dir(); })
      .def_prop_ro("num_layers", [](const PyModel& p) { return p.model().num_layers(); })
      .def_prop_ro("moe_layers", [](const PyModel& p) { return p.model().moe_layers(); })
      .def(
          "skip_reason", [](const PyModel& p, int i) { return p.model().skip_reason(i); },
          "index"_a);

  m.def("_layer_from_tensors", &layer_from_tensors_py, "family"_a, "top_k"_a, "tensors"_a, "math"_a,
        "activation"_a.none(), "batch_invariant"_a, "threads"_a, "backend"_a.none(), "exclude"_a,
        "tokens"_a);
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
  m.def("_backends", [] {
    std::vector<std::string> names;
    for (const Backend* b : registered_backends()) names.emplace_back(b->name());
    return names;
  });
}
