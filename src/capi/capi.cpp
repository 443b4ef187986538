// The C API (include/mxmoe/mxmoe.h) over the C++ one. Every entry point catches every
// exception and turns it into a status and the calling thread's last-error text.
#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/file.hpp"
#include "base/printable.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/edge_checks.hpp"
#include "mxmoe/environment.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/layer_from_tensors.hpp"
#include "mxmoe/mxmoe.h"
#include "mxmoe/oracle.hpp"
#include "mxmoe/runtime.hpp"
#include "runtime/setting_parsers.hpp"

namespace {

// The one piece of state the C API keeps outside handles, as its contract says: the text of
// the calling thread's last failure.
thread_local std::string last_error_text;

// This machine's probe and one runtime per thread count (mxmoe::RuntimeCache), shared by the
// layers made on it (so layers created alike share a pool): a checkpoint handle's, or layers
// from tensors created to share one.
struct Machine {
  std::mutex mutex;  // guards hardware
  std::optional<mxmoe::Hardware> hardware;
  mxmoe::RuntimeCache runtimes;

  // What a new layer runs on: the probe and the runtime of its thread count, shared with the
  // machine's other layers of that count (the layer holds it).
  std::pair<mxmoe::Hardware, std::shared_ptr<mxmoe::Runtime>> get(int threads) {
    const std::lock_guard lock(mutex);
    // The C API is an edge of the flow: the probe is capped by MXMOE_MAX_ISA, read by the
    // library's one parser of the MXMOE_* variables (environment.hpp), as in the CLI.
    if (!hardware) hardware = mxmoe::probe_hardware_from_environment();
    return {*hardware, runtimes.get(threads)};
  }
};

// What a checkpoint handle and its layers share: the mapping and the machine. Layers hold a
// reference, so closing the checkpoint handle never invalidates them.
struct State {
  explicit State(mxmoe::Checkpoint c) : checkpoint(std::move(c)) {}
  mxmoe::Checkpoint checkpoint;
  std::shared_ptr<Machine> machine = std::make_shared<Machine>();
};

mxmoe_layer_info info_of(const mxmoe::MoeLayer& layer) {
  const mxmoe::LayerSpec& s = layer.spec();
  const mxmoe::ExpertRange e = layer.experts();
  return mxmoe_layer_info{sizeof(mxmoe_layer_info), s.num_experts, s.top_k, s.hidden,
                          s.intermediate,           e.begin,       e.end};
}

mxmoe_status fail(mxmoe_status status, std::string text) noexcept {
  try {
    last_error_text = mxmoe::printable_message(text);  // no raw control byte reaches a host's log
  } catch (...) {  // no memory for the text: the status still says what happened
  }
  return status;
}

// Runs body(), mapping every exception to a status.
template <class Body>
mxmoe_status guarded(Body&& body) noexcept {
  try {
    body();
    return MXMOE_OK;
  } catch (const mxmoe::NoBackendError& e) {
    return fail(MXMOE_ERROR_NO_BACKEND, e.what());
  } catch (const mxmoe::LoadError& e) {
    return fail(MXMOE_ERROR_IO, e.what());
  } catch (const mxmoe::files::FileError& e) {
    return fail(MXMOE_ERROR_IO, e.what());
  } catch (const mxmoe::CommError& e) {
    return fail(MXMOE_ERROR_IO, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(MXMOE_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::out_of_range& e) {
    return fail(MXMOE_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const mxmoe::NumericError& e) {
    return fail(MXMOE_ERROR_NON_FINITE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(MXMOE_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::system_error& e) {
    return fail(MXMOE_ERROR_IO, e.what());
  } catch (const std::exception& e) {
    return fail(MXMOE_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(MXMOE_ERROR_INTERNAL, "internal error: an unknown exception");
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

char* copy_string(const std::string& s) {
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// A C caller may store any integer in the enum field; reading it as mxmoe_activation would be
// undefined behaviour for values outside the enumerators (UBSan: -fsanitize=enum), so the
// field's bytes are read as its underlying integer.
std::optional<mxmoe::ActivationFormat> activation(const mxmoe_activation& field) {
  std::underlying_type_t<mxmoe_activation> a{};
  std::memcpy(&a, &field, sizeof a);
  switch (a) {
    case MXMOE_ACTIVATION_DEFAULT:
      return std::nullopt;
    case MXMOE_ACTIVATION_F32:
      return mxmoe::ActivationFormat::f32;
    case MXMOE_ACTIVATION_BF16:
      return mxmoe::ActivationFormat::bf16;
    case MXMOE_ACTIVATION_INT8:
      return mxmoe::ActivationFormat::int8;
    case MXMOE_ACTIVATION_MXFP8:
      return mxmoe::ActivationFormat::mxfp8;
    default:
      break;
  }
  throw std::invalid_argument("params.activation: unknown value " + std::to_string(a));
}

// The request of PARAMS over the MXMOE_* variables, read by the library's one parser
// (config_from_environment, as the CLI and the Python package do): a field left at its
// mxmoe_request_default_params() value takes the variable's value where one is set, a field
// the caller set wins (as a flag does over a variable), applied and checked by the edges' one
// function (apply_request_overrides). A bad variable or field is a ConfigError:
// MXMOE_ERROR_INVALID_ARGUMENT, as it is exit code 2 for the command.
mxmoe::Request request_of(const mxmoe_request_params& p) {
  const mxmoe_request_params d = mxmoe_request_default_params();
  mxmoe::RequestOverrides o;
  if (const auto a = activation(p.activation)) o.activation = std::string(mxmoe::to_string(*a));
  if (p.batch_invariant) o.batch_invariant = true;  // false: the variable's
  if (p.threads != d.threads) o.threads = p.threads;
  o.tokens_hint = p.tokens_hint;
  o.ep_size = p.ep_size;
  o.ep_rank = p.ep_rank;
  if (p.backend != nullptr && *p.backend != '\0') o.forced_backend = std::string(p.backend);
  if (p.excluded_backends != nullptr)
    o.excluded_backends = mxmoe::split_comma_list(p.excluded_backends);
  return mxmoe::apply_request_overrides(
      mxmoe::config_from_environment().request, o, [](std::string_view field) {
        return "params." + std::string(field == "forced_backend" ? "backend" : field);
      });
}

// ---- Layers from tensors.

// A C enum field read as its underlying integer (as activation() does: a value outside the
// enumerators would be undefined behaviour to read as the enum).
template <class Enum>
std::underlying_type_t<Enum> enum_value(const Enum& field) {
  std::underlying_type_t<Enum> v{};
  std::memcpy(&v, &field, sizeof v);
  return v;
}

// The fields of a struct of mxmoe.h in order, for reading (or writing) a caller's struct of
// another version: a field is read when it lies wholly within struct_size bytes. Every struct
// that crosses the boundary has such a table, and the one reader and writer below.
struct Field {
  std::size_t offset, size;
  const char* name;
};
// The fields of each versioned struct, and what its messages call it.
template <class T>
struct Versioned;
template <class T>
constexpr bool lists_every_field() {
  const Field& last = *(std::end(Versioned<T>::fields) - 1);
  return sizeof(T) - last.offset - last.size < alignof(T);
}
#define MXMOE_VERSIONED(T, what, init_fn, ...)       \
  template <>                                        \
  struct Versioned<T> {                              \
    using S = T;                                     \
    static constexpr const char* name = what;        \
    static constexpr const char* init = init_fn;     \
    static constexpr Field fields[] = {__VA_ARGS__}; \
  }
#define F(f)                         \
  Field {                            \
    offsetof(S, f), sizeof(S::f), #f \
  }
MXMOE_VERSIONED(mxmoe_layer_tensors, "tensors", "mxmoe_layer_tensors_default()", F(struct_size),
                F(family), F(top_k), F(gate_up), F(w13_blocks), F(w13_scales), F(w2_blocks),
                F(w2_scales), F(num_experts), F(w1_blocks), F(w1_scales), F(w3_blocks),
                F(w3_scales), F(w2_expert_blocks), F(w2_expert_scales), F(w13_bias), F(w2_bias),
                F(router_weight), F(router_bias), F(selection_bias), F(activation_fn), F(alpha),
                F(limit), F(routing), F(renormalize), F(routed_scaling_factor), F(n_group),
                F(topk_group), F(expert_bias));
MXMOE_VERSIONED(mxmoe_request_params, "params", "mxmoe_request_default_params()", F(struct_size),
                F(activation), F(batch_invariant), F(threads), F(backend), F(excluded_backends),
                F(tokens_hint), F(ep_size), F(ep_rank));
MXMOE_VERSIONED(mxmoe_layer_info, "info", "mxmoe_layer_info_default()", F(struct_size),
                F(num_experts), F(top_k), F(hidden), F(intermediate), F(expert_begin),
                F(expert_end));
MXMOE_VERSIONED(mxmoe_communicator, "communicator", "mxmoe_communicator_default()", F(struct_size),
                F(rank), F(size), F(exchange), F(context));
#undef F
#undef MXMOE_VERSIONED
// A field appended to a struct must be appended to its table.
static_assert(lists_every_field<mxmoe_layer_tensors>() &&
                  lists_every_field<mxmoe_request_params>() &&
                  lists_every_field<mxmoe_layer_info>() && lists_every_field<mxmoe_communicator>(),
              "every field of a versioned struct must be in its Versioned<T>::fields");

// The caller's struct_size, checked against T's fields: it must cover struct_size itself and
// end between two fields (or past the last one).
template <class T>
std::size_t struct_size_of(const T* p) {
  using V = Versioned<T>;
  std::size_t size = 0;
  std::memcpy(&size, p, sizeof size);
  const std::string what = std::string(V::name) + "->struct_size = " + std::to_string(size);
  if (size < sizeof size)
    throw std::invalid_argument(what + ": start from " + V::init +
                                " (it sets struct_size to the sizeof of the caller's header)");
  for (const Field& f : V::fields)
    if (f.offset < size && size < f.offset + f.size)
      throw std::invalid_argument(what + " ends inside the field " + f.name + ": set it from " +
                                  V::init + " (sizeof of the header the caller was built with)");
  return size;
}

// The caller's struct as this library's version of it: the fields within struct_size copied,
// the others at DEFAULTS. A larger struct (a newer header) is accepted when the bytes this
// library does not know are zero (their defaults).
template <class T>
T read_versioned(const T* p, T defaults) {
  const std::size_t size = struct_size_of(p);
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (std::size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      throw std::invalid_argument(
          std::string(Versioned<T>::name) + "->struct_size = " + std::to_string(size) + ": byte " +
          std::to_string(i) + " lies past the " + std::to_string(sizeof(T)) +
          " bytes of this library's struct and is not zero (a field of a newer mxmoe.h that "
          "mxmoe " +
          mxmoe::build_info::kVersion + " does not know)");
  for (const Field& f : Versioned<T>::fields)
    if (f.offset + f.size <= size)
      std::memcpy(reinterpret_cast<unsigned char*>(&defaults) + f.offset, bytes + f.offset, f.size);
  return defaults;
}

// VALUE written into the caller's struct at OUT: only the fields within its struct_size (the
// struct_size itself left as the caller set it); bytes past this library's struct zeroed.
template <class T>
void write_versioned(T* out, const T& value) {
  const std::size_t size = struct_size_of(out);
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  for (const Field& f : Versioned<T>::fields)
    if (f.offset >= sizeof(std::size_t) && f.offset + f.size <= size)
      std::memcpy(bytes + f.offset, reinterpret_cast<const unsigned char*>(&value) + f.offset,
                  f.size);
  if (size > sizeof(T)) std::memset(bytes + sizeof(T), 0, size - sizeof(T));
}

mxmoe::HostTensor host_tensor(const mxmoe_tensor& t, const std::string& name) {
  mxmoe::HostTensor h;
  if (t.data == nullptr) return h;
  h.data = t.data;
  switch (enum_value(t.dtype)) {
    case MXMOE_DTYPE_U8:
      h.dtype = mxmoe::TensorDtype::u8;
      break;
    case MXMOE_DTYPE_F32:
      h.dtype = mxmoe::TensorDtype::f32;
      break;
    case MXMOE_DTYPE_BF16:
      h.dtype = mxmoe::TensorDtype::bf16;
      break;
    default:
      throw std::invalid_argument(name + ".dtype: " + std::to_string(enum_value(t.dtype)) +
                                  " is not an mxmoe_dtype (MXMOE_DTYPE_U8, _F32 or _BF16)");
  }
  require(t.ndim >= 1 && t.ndim <= 4,
          (name + ".ndim must be in 1..4, got " + std::to_string(t.ndim)).c_str());
  h.shape.assign(t.shape, t.shape + t.ndim);
  return h;
}

std::vector<mxmoe::HostTensor> host_tensors(const mxmoe_tensor* list, std::int32_t n,
                                            const char* name) {
  if (n == 0) {
    require(list == nullptr,
            (std::string("tensors->") + name + " is set but num_experts is 0 (the fused layout)")
                .c_str());
    return {};
  }
  require(list != nullptr,
          (std::string("tensors->") + name + " must point to num_experts tensors").c_str());
  std::vector<mxmoe::HostTensor> out;
  for (std::int32_t e = 0; e < n; ++e)
    out.push_back(host_tensor(list[e], std::string(name) + "[" + std::to_string(e) + "]"));
  return out;
}

template <class Parse>
auto parsed(const char* value, const char* field, Parse parse) {
  try {
    return parse(value);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("tensors->") + field + ": " + e.what());
  }
}

std::optional<bool> tri_state(std::int32_t v, const char* field) {
  require(v >= -1 && v <= 1,
          (std::string("tensors->") + field + " must be -1 (the family's), 0 or 1").c_str());
  return v < 0 ? std::nullopt : std::optional<bool>(v == 1);
}

// The spec (the family's math with the overrides, top_k) and tensors of T.
mxmoe::TensorLayer tensor_layer(const mxmoe_layer_tensors& t) {
  require(t.family != nullptr, ("tensors->family must name a model family: " +
                                std::string("gpt_oss, mixtral, qwen3_moe, deepseek_v3 or "
                                            "deepseek_v4"))
                                   .c_str());
  const mxmoe::Family family = parsed(t.family, "family", mxmoe::parse_family);
  mxmoe::MathOverrides o;
  if (t.activation_fn != nullptr)
    o.activation = parsed(t.activation_fn, "activation_fn", mxmoe::parse_activation_fn);
  if (t.alpha != 0) o.alpha = t.alpha;
  if (t.limit != 0) o.limit = t.limit;
  if (t.routing != nullptr) o.routing = parsed(t.routing, "routing", mxmoe::parse_routing_method);
  o.renormalize = tri_state(t.renormalize, "renormalize");
  if (t.routed_scaling_factor != 0) o.routed_scaling_factor = t.routed_scaling_factor;
  require(t.n_group >= 0 && t.topk_group >= 0,
          "tensors->n_group and topk_group must be 0 (the family's) or positive");
  if (t.n_group != 0) o.n_group = t.n_group;
  if (t.topk_group != 0) o.topk_group = t.topk_group;
  o.expert_bias = tri_state(t.expert_bias, "expert_bias");
  switch (enum_value(t.gate_up)) {
    case MXMOE_GATE_UP_DEFAULT:
      break;
    case MXMOE_GATE_UP_INTERLEAVED:
      o.gate_up = mxmoe::GateUpLayout::interleaved;
      break;
    case MXMOE_GATE_UP_HALVES:
      o.gate_up = mxmoe::GateUpLayout::halves;
      break;
    default:
      throw std::invalid_argument("tensors->gate_up: " + std::to_string(enum_value(t.gate_up)) +
                                  " is not an mxmoe_gate_up");
  }
  mxmoe::LayerSpec math = mxmoe::family_math(family, o);
  math.top_k = t.top_k;

  require(t.num_experts >= 0 && t.num_experts <= mxmoe::kMaxExperts,
          "tensors->num_experts must be 0 (the fused layout) or 1..65536 (per-expert tensors)");
  mxmoe::LayerTensors l;
  l.w13_blocks = host_tensor(t.w13_blocks, "w13_blocks");
  l.w13_scales = host_tensor(t.w13_scales, "w13_scales");
  l.w2_blocks = host_tensor(t.w2_blocks, "w2_blocks");
  l.w2_scales = host_tensor(t.w2_scales, "w2_scales");
  l.per_expert.w1_blocks = host_tensors(t.w1_blocks, t.num_experts, "w1_blocks");
  l.per_expert.w1_scales = host_tensors(t.w1_scales, t.num_experts, "w1_scales");
  l.per_expert.w3_blocks = host_tensors(t.w3_blocks, t.num_experts, "w3_blocks");
  l.per_expert.w3_scales = host_tensors(t.w3_scales, t.num_experts, "w3_scales");
  l.per_expert.w2_blocks = host_tensors(t.w2_expert_blocks, t.num_experts, "w2_expert_blocks");
  l.per_expert.w2_scales = host_tensors(t.w2_expert_scales, t.num_experts, "w2_expert_scales");
  l.w13_bias = host_tensor(t.w13_bias, "w13_bias");
  l.w2_bias = host_tensor(t.w2_bias, "w2_bias");
  l.router_weight = host_tensor(t.router_weight, "router_weight");
  l.router_bias = host_tensor(t.router_bias, "router_bias");
  l.selection_bias = host_tensor(t.selection_bias, "selection_bias");
  return mxmoe::layer_from_tensors(math, l);
}

// The host's exchange callback as a Communicator. A failed call breaks it (the contract of
// communicator.hpp): the layer's buffers of that call are in an unknown state.
class CallbackCommunicator final : public mxmoe::Communicator {
 public:
  explicit CallbackCommunicator(const mxmoe_communicator& c) : c_(c) {
    require(c.exchange != nullptr, "communicator.exchange must not be NULL");
    require(c.size >= 1 && c.size <= mxmoe::kMaxExperts, "communicator.size must be in 1..65536");
    require(c.rank >= 0 && c.rank < c.size, "communicator.rank must be in [0, size)");
    // The deadline is the callback's; CommOptions only documents that it has one.
  }
  int rank() const noexcept override { return c_.rank; }
  int size() const noexcept override { return c_.size; }
  const mxmoe::CommOptions& options() const noexcept override { return options_; }

  void exchange(std::span<const mxmoe::SendBuffer> sends,
                std::span<const mxmoe::RecvBuffer> recvs) override {
    if (broken_) throw mxmoe::CommError({}, "the communicator failed earlier: " + reason_);
    sends_.clear();
    recvs_.clear();
    for (const mxmoe::SendBuffer& b : sends)
      sends_.push_back({b.peer, const_cast<std::byte*>(b.data), b.bytes});
    for (const mxmoe::RecvBuffer& b : recvs) recvs_.push_back({b.peer, b.data, b.bytes});
    char error[512] = {0};
    const int rc = c_.exchange(c_.context, sends_.data(), sends_.size(), recvs_.data(),
                               recvs_.size(), error, sizeof error);
    if (rc == 0) return;
    error[sizeof error - 1] = '\0';
    broken_ = true;
    reason_ = fmt_reason(rc, error);
    throw mxmoe::CommError({}, reason_);
  }

 private:
  std::string fmt_reason(int rc, const char* error) const {
    return "rank " + std::to_string(c_.rank) + ": the exchange callback failed (" +
           std::to_string(rc) + ")" + (error[0] != '\0' ? std::string(": ") + error : "");
  }
  mxmoe_communicator c_;
  mxmoe::CommOptions options_;
  std::vector<mxmoe_message> sends_, recvs_;
  bool broken_ = false;
  std::string reason_;
};

}  // namespace

struct mxmoe_checkpoint {
  std::shared_ptr<State> state;
};

struct mxmoe_layer {
  // Declared first: destroyed after the layer that uses them. state is the checkpoint whose
  // mapping the layer reads (null for a layer from tensors: those are the caller's).
  std::shared_ptr<State> state;
  std::shared_ptr<Machine> machine;
  std::shared_ptr<mxmoe::Runtime> runtime;  // the pool it runs on (the machine's, shared)
  mxmoe::MoeLayer layer;
};

struct mxmoe_ep_layer {
  std::shared_ptr<State> state;  // declared first: destroyed after the layer that uses it
  std::shared_ptr<mxmoe::Runtime> runtime;
  mxmoe::LayerWeights weights;
  std::unique_ptr<CallbackCommunicator> comm;
  std::optional<mxmoe::ExpertParallelLayer> layer;
};

namespace {

// One array a layer call reads: its name, its data, and whether it must be given.
struct CallInput {
  const char* name;
  const void* data;
  bool required;
};

const mxmoe::MoeLayer& local_layer(const mxmoe_layer& l) {
  return l.layer;
}
const mxmoe::MoeLayer& local_layer(const mxmoe_ep_layer& l) {
  return l.layer->local();
}

[[noreturn]] void refuse(const char* fn, const char* what) {
  throw std::invalid_argument(std::string(fn) + ": " + what);
}

// A forward call at the boundary, with the one contract of the edges (mxmoe/edge_checks.hpp,
// as the Python package and the command line): the pointers and the token bound, every input
// against the output y (no overlap), then CALL (which refuses NaN/Inf in x and bad routing),
// then y's values (NaN/Inf: MXMOE_ERROR_NON_FINITE naming the tokens). Allocates nothing
// unless it refuses.
template <class Layer, class Y, class Call>
mxmoe_status layer_call(const char* fn, Layer* layer, std::int64_t tokens,
                        std::initializer_list<CallInput> inputs, Y* y, Call&& call) noexcept {
  return guarded([&] {
    if (layer == nullptr || tokens < 0) refuse(fn, "NULL layer or tokens < 0");
    const mxmoe::LayerSpec& spec = local_layer(*layer).spec();
    mxmoe::require_call_tokens(fn, tokens, spec.top_k);
    const auto t = static_cast<std::size_t>(tokens);
    const auto h = static_cast<std::size_t>(spec.hidden);
    const auto k = static_cast<std::size_t>(spec.top_k);
    std::array<mxmoe::ArrayBytes, 3> in{};
    std::size_t n = 0;
    for (const CallInput& i : inputs) {
      if (tokens > 0 && i.required && i.data == nullptr)
        refuse(fn, (std::string(i.name) + " must not be NULL").c_str());
      // x [tokens, H] of Y; token_ids [tokens] int32; topk_ids, topk_weights [tokens, top_k].
      const std::size_t bytes = n == 0                                  ? t * h * sizeof(Y)
                                : std::strcmp(i.name, "token_ids") == 0 ? t * 4
                                                                        : t * k * 4;
      in.at(n++) = mxmoe::dense_bytes(i.name, i.data, bytes);
    }
    if (tokens > 0 && y == nullptr) refuse(fn, "y must not be NULL");
    const mxmoe::ArrayBytes out = mxmoe::dense_bytes("y", y, t * h * sizeof(Y));
    mxmoe::require_disjoint({in.data(), n}, {&out, 1});
    mxmoe::require_disjoint(local_layer(*layer).weight_bytes_read(), {&out, 1});
    call();
    mxmoe::require_finite_output("the output", y, tokens, spec.hidden);
  });
}

}  // namespace

extern "C" {

const char* mxmoe_version(void) {
  return mxmoe::build_info::kVersion;
}

const char* mxmoe_last_error(void) {
  return last_error_text.c_str();
}

void mxmoe_free(void* p) {
  std::free(p);
}

mxmoe_status mxmoe_checkpoint_open(const char* dir, mxmoe_checkpoint** out) {
  return guarded([&] {
    require(dir != nullptr && out != nullptr,
            "mxmoe_checkpoint_open: dir and out must not be NULL");
    auto handle = std::make_unique<mxmoe_checkpoint>();
    handle->state = std::make_shared<State>(mxmoe::Checkpoint::open(dir));
    *out = handle.release();
  });
}

void mxmoe_checkpoint_close(mxmoe_checkpoint* checkpoint) {
  delete checkpoint;
}

mxmoe_status mxmoe_checkpoint_num_layers(const mxmoe_checkpoint* checkpoint, int32_t* out) {
  return guarded([&] {
    require(checkpoint != nullptr && out != nullptr,
            "mxmoe_checkpoint_num_layers: checkpoint and out must not be NULL");
    *out = checkpoint->state->checkpoint.num_layers();
  });
}

mxmoe_status mxmoe_checkpoint_is_moe_layer(const mxmoe_checkpoint* checkpoint, int32_t layer,
                                           bool* out) {
  return guarded([&] {
    require(checkpoint != nullptr && out != nullptr,
            "mxmoe_checkpoint_is_moe_layer: checkpoint and out must not be NULL");
    *out = checkpoint->state->checkpoint.non_moe_reason(layer).empty();
  });
}

mxmoe_layer_info mxmoe_layer_info_default(void) {
  mxmoe_layer_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  return info;
}

mxmoe_communicator mxmoe_communicator_default(void) {
  mxmoe_communicator c;
  std::memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.size = 1;
  return c;
}

mxmoe_request_params mxmoe_request_default_params(void) {
  mxmoe_request_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.activation = MXMOE_ACTIVATION_DEFAULT;
  p.batch_invariant = false;
  p.threads = 0;
  p.backend = nullptr;
  p.excluded_backends = nullptr;
  p.tokens_hint = 1;
  p.ep_size = 1;
  p.ep_rank = 0;
  return p;
}

mxmoe_status mxmoe_layer_create(mxmoe_checkpoint* checkpoint, int32_t layer,
                                const mxmoe_request_params* params, mxmoe_layer** out) {
  return guarded([&] {
    require(checkpoint != nullptr && params != nullptr && out != nullptr,
            "mxmoe_layer_create: checkpoint, params and out must not be NULL");
    const std::shared_ptr<State>& state = checkpoint->state;
    const mxmoe::Request request =
        request_of(read_versioned(params, mxmoe_request_default_params()));
    const mxmoe::LayerSpec spec = state->checkpoint.layer_spec(layer);
    const mxmoe::LayerWeights weights = state->checkpoint.layer_weights(layer);
    const auto [hw, runtime] = state->machine->get(request.threads);
    *out = new mxmoe_layer{state, state->machine, runtime,
                           mxmoe::make_layer(spec, weights, hw, request, *runtime)};
  });
}

mxmoe_layer_tensors mxmoe_layer_tensors_default(void) {
  mxmoe_layer_tensors t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.gate_up = MXMOE_GATE_UP_DEFAULT;
  t.renormalize = -1;
  t.expert_bias = -1;
  return t;
}

mxmoe_status mxmoe_layer_create_from_tensors(const mxmoe_layer_tensors* tensors,
                                             const mxmoe_request_params* params,
                                             const mxmoe_layer* share_pool_with,
                                             mxmoe_layer** out) {
  return guarded([&] {
    require(tensors != nullptr && params != nullptr && out != nullptr,
            "mxmoe_layer_create_from_tensors: tensors, params and out must not be NULL");
    const mxmoe::Request request =
        request_of(read_versioned(params, mxmoe_request_default_params()));
    const mxmoe::TensorLayer from =
        tensor_layer(read_versioned(tensors, mxmoe_layer_tensors_default()));
    const std::shared_ptr<Machine> machine =
        share_pool_with != nullptr ? share_pool_with->machine : std::make_shared<Machine>();
    const auto [hw, runtime] = machine->get(request.threads);
    *out = new mxmoe_layer{nullptr, machine, runtime,
                           mxmoe::make_layer(from.spec, from.weights, hw, request, *runtime)};
  });
}

mxmoe_status mxmoe_layer_reads_source_weights(const mxmoe_layer* layer, bool* out) {
  return guarded([&] {
    require(layer != nullptr && out != nullptr,
            "mxmoe_layer_reads_source_weights: layer and out must not be NULL");
    *out = layer->layer.reads_weight_views();
  });
}

mxmoe_status mxmoe_ep_layer_create(mxmoe_checkpoint* checkpoint, int32_t layer,
                                   const mxmoe_request_params* params,
                                   const mxmoe_communicator* communicator, mxmoe_ep_layer** out) {
  return guarded([&] {
    require(checkpoint != nullptr && params != nullptr && communicator != nullptr && out != nullptr,
            "mxmoe_ep_layer_create: checkpoint, params, communicator and out must not be NULL");
    auto handle = std::make_unique<mxmoe_ep_layer>();
    handle->state = checkpoint->state;
    handle->comm = std::make_unique<CallbackCommunicator>(
        read_versioned(communicator, mxmoe_communicator_default()));
    const int rank = handle->comm->rank(), size = handle->comm->size();
    mxmoe::Request request = request_of(read_versioned(params, mxmoe_request_default_params()));
    request.ep_size = size;
    request.ep_rank = rank;
    mxmoe::agree_on_checkpoint(*handle->comm, &handle->state->checkpoint);
    const mxmoe::LayerSpec spec = handle->state->checkpoint.layer_spec(layer);
    const mxmoe::Placement placement = mxmoe::Placement::contiguous(spec.num_experts, size);
    handle->weights = handle->state->checkpoint.layer_weights(layer, placement.runs(rank));
    const auto [hw, runtime] = handle->state->machine->get(request.threads);
    handle->runtime = runtime;
    handle->layer.emplace(mxmoe::ExpertParallelLayer::create(spec, handle->weights, hw, request,
                                                             placement, *runtime, *handle->comm));
    *out = handle.release();
  });
}

void mxmoe_ep_layer_destroy(mxmoe_ep_layer* layer) {
  delete layer;
}

mxmoe_status mxmoe_ep_layer_get_info(const mxmoe_ep_layer* layer, mxmoe_layer_info* out) {
  return guarded([&] {
    require(layer != nullptr && out != nullptr,
            "mxmoe_ep_layer_get_info: layer and out must not be NULL");
    write_versioned(out, info_of(layer->layer->local()));
  });
}

mxmoe_status mxmoe_ep_layer_forward_f32(mxmoe_ep_layer* layer, const float* x, int64_t tokens,
                                        float* y) {
  return layer_call("mxmoe_ep_layer_forward_f32", layer, tokens, {{"x", x, true}}, y,
                    [&] { layer->layer->forward(x, tokens, y); });
}

mxmoe_status mxmoe_ep_layer_forward_tokens_f32(mxmoe_ep_layer* layer, const float* x,
                                               const int32_t* token_ids, int64_t tokens, float* y) {
  return layer_call("mxmoe_ep_layer_forward_tokens_f32", layer, tokens,
                    {{"x", x, true}, {"token_ids", token_ids, false}}, y,
                    [&] { layer->layer->forward(x, token_ids, tokens, y); });
}

void mxmoe_layer_destroy(mxmoe_layer* layer) {
  delete layer;
}

mxmoe_status mxmoe_layer_get_info(const mxmoe_layer* layer, mxmoe_layer_info* out) {
  return guarded([&] {
    require(layer != nullptr && out != nullptr,
            "mxmoe_layer_get_info: layer and out must not be NULL");
    write_versioned(out, info_of(layer->layer));
  });
}

mxmoe_status mxmoe_layer_forward_f32(mxmoe_layer* layer, const float* x, int64_t tokens, float* y) {
  return layer_call("mxmoe_layer_forward_f32", layer, tokens, {{"x", x, true}}, y,
                    [&] { layer->layer.forward({.tokens = tokens, .x = x, .y = y}); });
}

mxmoe_status mxmoe_layer_vocab(const mxmoe_layer* layer, int32_t* out) {
  return guarded([&] {
    require(layer != nullptr && out != nullptr,
            "mxmoe_layer_vocab: layer and out must not be NULL");
    *out =
        layer->layer.spec().routing == mxmoe::RoutingMethod::hash ? layer->layer.spec().vocab : 0;
  });
}

mxmoe_status mxmoe_layer_forward_tokens_f32(mxmoe_layer* layer, const float* x,
                                            const int32_t* token_ids, int64_t tokens, float* y) {
  return layer_call(
      "mxmoe_layer_forward_tokens_f32", layer, tokens,
      {{"x", x, true}, {"token_ids", token_ids, false}}, y,
      [&] { layer->layer.forward({.tokens = tokens, .x = x, .y = y, .token_ids = token_ids}); });
}

mxmoe_status mxmoe_layer_forward_tokens_bf16(mxmoe_layer* layer, const uint16_t* x,
                                             const int32_t* token_ids, int64_t tokens,
                                             uint16_t* y) {
  return layer_call(
      "mxmoe_layer_forward_tokens_bf16", layer, tokens,
      {{"x", x, true}, {"token_ids", token_ids, false}}, y, [&] {
        layer->layer.forward({.tokens = tokens, .x_bf16 = x, .y_bf16 = y, .token_ids = token_ids});
      });
}

mxmoe_status mxmoe_layer_forward_routed_f32(mxmoe_layer* layer, const float* x,
                                            const int32_t* topk_ids, const float* topk_weights,
                                            int64_t tokens, float* y) {
  return layer_call(
      "mxmoe_layer_forward_routed_f32", layer, tokens,
      {{"x", x, true}, {"topk_ids", topk_ids, true}, {"topk_weights", topk_weights, true}}, y, [&] {
        layer->layer.forward({.tokens = tokens,
                              .x = x,
                              .y = y,
                              .expert_ids = topk_ids,
                              .expert_weights = topk_weights});
      });
}

mxmoe_status mxmoe_layer_forward_bf16(mxmoe_layer* layer, const uint16_t* x, int64_t tokens,
                                      uint16_t* y) {
  return layer_call("mxmoe_layer_forward_bf16", layer, tokens, {{"x", x, true}}, y,
                    [&] { layer->layer.forward({.tokens = tokens, .x_bf16 = x, .y_bf16 = y}); });
}

mxmoe_status mxmoe_layer_forward_routed_bf16(mxmoe_layer* layer, const uint16_t* x,
                                             const int32_t* topk_ids, const float* topk_weights,
                                             int64_t tokens, uint16_t* y) {
  return layer_call(
      "mxmoe_layer_forward_routed_bf16", layer, tokens,
      {{"x", x, true}, {"topk_ids", topk_ids, true}, {"topk_weights", topk_weights, true}}, y, [&] {
        layer->layer.forward({.tokens = tokens,
                              .x_bf16 = x,
                              .y_bf16 = y,
                              .expert_ids = topk_ids,
                              .expert_weights = topk_weights});
      });
}

mxmoe_status mxmoe_layer_selection_json(const mxmoe_layer* layer, char** json) {
  return guarded([&] {
    require(layer != nullptr && json != nullptr,
            "mxmoe_layer_selection_json: layer and json must not be NULL");
    *json = copy_string(mxmoe::to_json(layer->layer.selection()));
  });
}

mxmoe_status mxmoe_explain_json(const char* deployment_json, char** selection_json) {
  mxmoe::Selection selection;
  const mxmoe_status status = guarded([&] {
    require(deployment_json != nullptr && selection_json != nullptr,
            "mxmoe_explain_json: deployment_json and selection_json must not be NULL");
    const mxmoe::Deployment d = mxmoe::deployment_from_json(deployment_json);
    selection = mxmoe::judge(d, mxmoe::preferences_for(d.layer.family));
    *selection_json = copy_string(mxmoe::to_json(selection));
  });
  if (status != MXMOE_OK || !selection.chosen.empty()) return status;
  return fail(MXMOE_ERROR_NO_BACKEND, mxmoe::format_no_backend_message(selection));
}

}  // extern "C"
