#include "mxmoe/model.hpp"

#include <map>
#include <mutex>

#include "mxmoe/oracle.hpp"

namespace mxmoe {

struct Model::Impl {
  Impl(Checkpoint c, const Hardware& hw, Runtime& rt, ModelOptions o)
      : checkpoint(std::move(c)), hardware(hw), runtime(&rt), options(std::move(o)) {}
  Checkpoint checkpoint;
  Hardware hardware;
  Runtime* runtime;
  ModelOptions options;
  mutable std::mutex mutex;        // guards `layers`
  std::map<int, MoeLayer> layers;  // bound so far (std::map: references stay valid)

  MoeLayer make(int index, const Request& request) const {
    const LayerSpec spec = checkpoint.layer_spec(index);
    const LayerWeights weights = checkpoint.layer_weights(index);
    MoeLayer layer = make_layer(spec, weights, hardware, request, *runtime);
    // A backend that packed its own copy computes from it: the mapped expert bytes need not
    // stay resident beside it (docs/CHECKPOINTS.md, memory).
    if (!layer.reads_weight_views()) checkpoint.release_expert_pages(weights);
    return layer;
  }
};

Model::Model(const std::string& dir, const Hardware& hardware, Runtime& runtime,
             ModelOptions options)
    : impl_(std::make_unique<Impl>(Checkpoint::open(dir), hardware, runtime, std::move(options))) {
  if (impl_->options.eager)
    for (int index : moe_layers()) layer(index);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const Checkpoint& Model::checkpoint() const noexcept {
  return impl_->checkpoint;
}

int Model::num_layers() const noexcept {
  return impl_->checkpoint.num_layers();
}

std::vector<int> Model::moe_layers() const {
  std::vector<int> out;
  for (int i = 0; i < num_layers(); ++i)
    if (impl_->checkpoint.non_moe_reason(i).empty()) out.push_back(i);
  return out;
}

std::string Model::skip_reason(int layer) const {
  return impl_->checkpoint.non_moe_reason(layer);
}

MoeLayer& Model::layer(int index) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->layers.find(index);
  if (it == impl_->layers.end())
    it = impl_->layers.emplace(index, impl_->make(index, impl_->options.request)).first;
  return it->second;
}

MoeLayer Model::bind(int index, const Request& request) const {
  return impl_->make(index, request);
}

int Model::bound_layers() const {
  std::lock_guard lock(impl_->mutex);
  return static_cast<int>(impl_->layers.size());
}

std::size_t Model::packed_weight_bytes() const {
  std::lock_guard lock(impl_->mutex);
  std::size_t bytes = 0;
  for (const auto& [index, l] : impl_->layers) bytes += l.packed_weight_bytes();
  return bytes;
}

}  // namespace mxmoe
