// mxmoe.Layer and the model it comes from (mxmoe.Model's core, _Model), and a layer from an
// engine's tensors (_layer_from_tensors): the layer calls read the caller's arrays in place,
// compute with the GIL released and write the caller's kind of array.
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
#include "bindings.hpp"
#include "edge.hpp"
#include "mxmoe/mxmoe.hpp"
#include "nb.hpp"

namespace mxmoe::python {
namespace {

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
// checked before anything is sized from them; and, for a layer that reads its arrays in place,
// those arrays where the layer found them (require_in_place).
Matrix read_x(PyLayer& self, nb::handle x_obj, bool bf16_bits) {
  for (const WeightArray& w : self.sources) require_in_place(w);
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

// A call's INPUTS and the weights the layer reads in place: its output may overlap none.
std::vector<ArrayBytes> read_by_call(const PyLayer& self,
                                     std::initializer_list<ArrayBytes> inputs) {
  std::vector<ArrayBytes> all(inputs);
  const std::span<const ArrayBytes> weights = self.layer.weight_bytes_read();
  all.insert(all.end(), weights.begin(), weights.end());
  return all;
}

nb::object forward(PyLayer& self, nb::handle x_obj, nb::handle out, bool bf16_bits,
                   nb::handle token_ids_obj) {
  const Matrix x = read_x(self, x_obj, bf16_bits);
  std::optional<Matrix> ids;
  if (!token_ids_obj.is_none())
    ids = read_matrix(token_ids_obj,
                      {"token_ids", {Element::i32, Element::i64}, x.rows, 0, "tokens", ""});
  const std::vector<ArrayBytes> inputs = read_by_call(
      self,
      {bytes_of(x, "x"), ids ? bytes_of(*ids, "token_ids") : ArrayBytes{"token_ids", {}, {}}});
  Result y(out, x, x.cols, inputs);
  if (x.rows > 0) {
    nb::gil_scoped_release release;
    std::lock_guard lock(self.mutex);
    const std::byte* xp = contiguous_bytes(x, self.x_scratch);
    const std::int32_t* tp = ids ? token_ids_as_int32(*ids, self) : nullptr;
    if (x.element == Element::f32)
      self.layer.forward({.tokens = x.rows,
                          .x = reinterpret_cast<const float*>(xp),
                          .y = reinterpret_cast<float*>(y.data()),
                          .token_ids = tp});
    else
      self.layer.forward({.tokens = x.rows,
                          .x_bf16 = reinterpret_cast<const std::uint16_t*>(xp),
                          .y_bf16 = reinterpret_cast<std::uint16_t*>(y.data()),
                          .token_ids = tp});
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
  const std::vector<ArrayBytes> inputs = read_by_call(
      self, {bytes_of(x, "x"), bytes_of(ids, "topk_ids"), bytes_of(weights, "topk_weights")});
  Result y(out, x, x.cols, inputs);
  if (x.rows > 0) {
    nb::gil_scoped_release release;
    std::lock_guard lock(self.mutex);
    const std::byte* xp = contiguous_bytes(x, self.x_scratch);
    const std::int32_t* idp = ids_as_int32(ids, self);
    const auto* wp =
        reinterpret_cast<const float*>(contiguous_bytes(weights, self.weights_scratch));
    if (x.element == Element::f32)
      self.layer.forward({.tokens = x.rows,
                          .x = reinterpret_cast<const float*>(xp),
                          .y = reinterpret_cast<float*>(y.data()),
                          .expert_ids = idp,
                          .expert_weights = wp});
    else
      self.layer.forward({.tokens = x.rows,
                          .x_bf16 = reinterpret_cast<const std::uint16_t*>(xp),
                          .y_bf16 = reinterpret_cast<std::uint16_t*>(y.data()),
                          .expert_ids = idp,
                          .expert_weights = wp});
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
  const std::vector<ArrayBytes> inputs = read_by_call(self, {bytes_of(x, "x")});
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
      self.layer.forward({.tokens = x.rows,
                          .x = reinterpret_cast<const float*>(x.data),
                          .y = reinterpret_cast<float*>(y.data())});
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

}  // namespace

void bind_layers(nb::module_& m) {
  using namespace nb::literals;
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
}

}  // namespace mxmoe::python
