// The C API (include/mxmoe/mxmoe.h) over the C++ one. Every entry point catches every
// exception and turns it into a status and the calling thread's last-error text.
#include <cstdlib>
#include <cstring>
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
#include "mxmoe/build_info.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/mxmoe.h"
#include "mxmoe/oracle.hpp"
#include "mxmoe/runtime.hpp"

namespace {

// The one piece of state the C API keeps outside handles, as its contract says: the text of
// the calling thread's last failure.
thread_local std::string last_error_text;

// What a checkpoint handle and its layers share: the mapping, this machine's probe and one
// runtime per thread count (so layers created alike share a pool). Layers hold a reference,
// so closing the checkpoint handle never invalidates them.
struct State {
  explicit State(mxmoe::Checkpoint c) : checkpoint(std::move(c)) {}
  mxmoe::Checkpoint checkpoint;
  std::mutex mutex;  // guards hardware and runtimes
  std::optional<mxmoe::Hardware> hardware;
  std::map<int, std::unique_ptr<mxmoe::Runtime>> runtimes;

  const mxmoe::Hardware& probe() {
    // The C API is an edge of the flow: the probe is capped by MXMOE_MAX_ISA, read by the
    // library's one parser of the MXMOE_* variables (config.hpp), as in the CLI.
    if (!hardware) hardware = mxmoe::probe_hardware_from_environment();
    return *hardware;
  }
  mxmoe::Runtime& runtime(int threads) {
    std::unique_ptr<mxmoe::Runtime>& r = runtimes[threads];
    if (!r) r = std::make_unique<mxmoe::Runtime>(threads);
    return *r;
  }
  // What a new layer runs on: the probe and the runtime of its thread count.
  std::pair<mxmoe::Hardware, mxmoe::Runtime*> machine(int threads) {
    const std::lock_guard lock(mutex);
    return {probe(), &runtime(threads)};
  }
};

mxmoe_layer_info info_of(const mxmoe::MoeLayer& layer) {
  const mxmoe::LayerSpec& s = layer.spec();
  const mxmoe::ExpertRange e = layer.experts();
  return mxmoe_layer_info{s.num_experts, s.top_k, s.hidden, s.intermediate, e.begin, e.end};
}

mxmoe_status fail(mxmoe_status status, std::string text) noexcept {
  try {
    last_error_text = std::move(text);
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
// the caller set wins (as a flag does over a variable). A bad variable is a ConfigError:
// MXMOE_ERROR_INVALID_ARGUMENT, as it is exit code 2 for the command.
mxmoe::Request request_of(const mxmoe_request_params& p) {
  const mxmoe_request_params d = mxmoe_request_default_params();
  mxmoe::Request r = mxmoe::config_from_environment().request;
  if (const auto a = activation(p.activation)) r.activation = a;  // DEFAULT leaves the variable's
  if (p.batch_invariant) r.batch_invariant = true;
  require(p.threads >= 0 && p.threads <= mxmoe::kMaxThreads,
          "params.threads must be 0 (every logical CPU) or 1..1024");
  if (p.threads != d.threads) r.threads = p.threads;
  require(p.tokens_hint >= 1, "params.tokens_hint must be at least 1");
  r.tokens_hint = p.tokens_hint;
  require(p.ep_size >= 1 && p.ep_rank >= 0 && p.ep_rank < p.ep_size,
          "params.ep_rank must be in [0, params.ep_size) and params.ep_size at least 1");
  r.ep_size = p.ep_size;
  r.ep_rank = p.ep_rank;
  if (p.backend != nullptr && *p.backend != '\0') {
    if (mxmoe::find_backend(p.backend) == nullptr)
      throw std::invalid_argument(std::string("params.backend: unknown backend '") + p.backend +
                                  "'; valid backends: " + mxmoe::backend_names());
    r.forced_backend = p.backend;
  }
  if (p.excluded_backends != nullptr)
    r.excluded_backends =
        mxmoe::parse_backend_list("params.excluded_backends", p.excluded_backends);
  return r;
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
  std::shared_ptr<State> state;  // declared first: destroyed after the layer that uses it
  mxmoe::MoeLayer layer;
};

struct mxmoe_ep_layer {
  std::shared_ptr<State> state;  // declared first: destroyed after the layer that uses it
  mxmoe::LayerWeights weights;
  std::unique_ptr<CallbackCommunicator> comm;
  std::optional<mxmoe::ExpertParallelLayer> layer;
};

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

mxmoe_request_params mxmoe_request_default_params(void) {
  mxmoe_request_params p;
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
    const mxmoe::Request request = request_of(*params);
    const mxmoe::LayerSpec spec = state->checkpoint.layer_spec(layer);
    const mxmoe::LayerWeights weights = state->checkpoint.layer_weights(layer);
    const auto [hw, runtime] = state->machine(request.threads);
    *out = new mxmoe_layer{state, mxmoe::make_layer(spec, weights, hw, request, *runtime)};
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
    handle->comm = std::make_unique<CallbackCommunicator>(*communicator);
    const int rank = handle->comm->rank(), size = handle->comm->size();
    mxmoe::Request request = request_of(*params);
    request.ep_size = size;
    request.ep_rank = rank;
    const mxmoe::LayerSpec spec = handle->state->checkpoint.layer_spec(layer);
    const mxmoe::Placement placement = mxmoe::Placement::contiguous(spec.num_experts, size);
    handle->weights = handle->state->checkpoint.layer_weights(layer, placement.runs(rank));
    const auto [hw, runtime] = handle->state->machine(request.threads);
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
    *out = info_of(layer->layer->local());
  });
}

mxmoe_status mxmoe_ep_layer_forward_f32(mxmoe_ep_layer* layer, const float* x, int64_t tokens,
                                        float* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_ep_layer_forward_f32: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_ep_layer_forward_f32: x and y must not be NULL");
    layer->layer->forward(x, tokens, y);
  });
}

mxmoe_status mxmoe_ep_layer_forward_tokens_f32(mxmoe_ep_layer* layer, const float* x,
                                               const int32_t* token_ids, int64_t tokens,
                                               float* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_ep_layer_forward_tokens_f32: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_ep_layer_forward_tokens_f32: x and y must not be NULL");
    layer->layer->forward(x, token_ids, tokens, y);
  });
}

void mxmoe_layer_destroy(mxmoe_layer* layer) {
  delete layer;
}

mxmoe_status mxmoe_layer_get_info(const mxmoe_layer* layer, mxmoe_layer_info* out) {
  return guarded([&] {
    require(layer != nullptr && out != nullptr,
            "mxmoe_layer_get_info: layer and out must not be NULL");
    *out = info_of(layer->layer);
  });
}

mxmoe_status mxmoe_layer_forward_f32(mxmoe_layer* layer, const float* x, int64_t tokens, float* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0, "mxmoe_layer_forward_f32: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_layer_forward_f32: x and y must not be NULL");
    layer->layer.forward(x, tokens, y);
  });
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
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_layer_forward_tokens_f32: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_layer_forward_tokens_f32: x and y must not be NULL");
    layer->layer.forward(x, token_ids, tokens, y);
  });
}

mxmoe_status mxmoe_layer_forward_tokens_bf16(mxmoe_layer* layer, const uint16_t* x,
                                             const int32_t* token_ids, int64_t tokens,
                                             uint16_t* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_layer_forward_tokens_bf16: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_layer_forward_tokens_bf16: x and y must not be NULL");
    layer->layer.forward_bf16(x, token_ids, tokens, y);
  });
}

mxmoe_status mxmoe_layer_forward_routed_f32(mxmoe_layer* layer, const float* x,
                                            const int32_t* topk_ids, const float* topk_weights,
                                            int64_t tokens, float* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_layer_forward_routed_f32: NULL layer or tokens < 0");
    require(tokens == 0 ||
                (x != nullptr && topk_ids != nullptr && topk_weights != nullptr && y != nullptr),
            "mxmoe_layer_forward_routed_f32: x, topk_ids, topk_weights and y must not be NULL");
    layer->layer.forward_routed(x, topk_ids, topk_weights, tokens, y);
  });
}

mxmoe_status mxmoe_layer_forward_bf16(mxmoe_layer* layer, const uint16_t* x, int64_t tokens,
                                      uint16_t* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0, "mxmoe_layer_forward_bf16: NULL layer or tokens < 0");
    require(tokens == 0 || (x != nullptr && y != nullptr),
            "mxmoe_layer_forward_bf16: x and y must not be NULL");
    layer->layer.forward_bf16(x, tokens, y);
  });
}

mxmoe_status mxmoe_layer_forward_routed_bf16(mxmoe_layer* layer, const uint16_t* x,
                                             const int32_t* topk_ids, const float* topk_weights,
                                             int64_t tokens, uint16_t* y) {
  return guarded([&] {
    require(layer != nullptr && tokens >= 0,
            "mxmoe_layer_forward_routed_bf16: NULL layer or tokens < 0");
    require(tokens == 0 ||
                (x != nullptr && topk_ids != nullptr && topk_weights != nullptr && y != nullptr),
            "mxmoe_layer_forward_routed_bf16: x, topk_ids, topk_weights and y must not be NULL");
    layer->layer.forward_routed_bf16(x, topk_ids, topk_weights, tokens, y);
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
