// Checkpoint: the public face of ModelDir. Layer views stay valid while it lives.
#include "mxmoe/checkpoint.hpp"

#include <fmt/core.h>

#include <filesystem>
#include <iterator>
#include <map>
#include <stdexcept>

#include "base/mapped_reads.hpp"
#include "io/model_dir.hpp"
#include "model/mapped_weights.hpp"

namespace mxmoe {

namespace {
// BIND() reads the mapping: a read of a page a file lost is a LoadError naming the file
// (base/mapped_reads.hpp) when it is one of the files the weights are in; an error BIND
// raised is reported as the fault of any of SLOTS instead (it may have refused the zeros).
template <class F>
LayerWeights bind_guarded(std::span<const int> slots, F&& bind) {
  LayerWeights w;
  try {
    const mapped_reads::ReadScope scope;
    w = bind();
  } catch (...) {
    mapped_reads::throw_if_faulted(slots);
    throw;
  }
  mapped_reads::throw_if_faulted(mapped_sources(w));
  return w;
}
}  // namespace

struct Checkpoint::Impl {
  io::ModelDir model;
  std::vector<int> slots = model.tensors.mapped_slots();
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

Checkpoint Checkpoint::open(const std::string& dir) {
  return Checkpoint(std::make_unique<Impl>(Impl{io::ModelDir::open(dir)}));
}

int Checkpoint::num_layers() const noexcept {
  return impl_->model.config.num_layers;
}

std::string Checkpoint::non_moe_reason(int layer) const {
  const io::ModelDir& m = impl_->model;
  if (layer < 0 || layer >= m.config.num_layers)
    throw LoadError(fmt::format("{}: layer {} is out of range (the model has {} layers)", m.dir,
                                layer, m.config.num_layers));
  return m.config.non_moe_reason[static_cast<std::size_t>(layer)];
}

const std::string& Checkpoint::dir() const noexcept {
  return impl_->model.dir;
}

const std::string& Checkpoint::config_json() const noexcept {
  return impl_->model.config_text;
}

std::string Checkpoint::tensor_table() const {
  const io::TensorSet& set = impl_->model.tensors;
  std::map<const SafetensorsFile*, std::string> names;  // the file's name in the directory
  for (const SafetensorsFile& f : set.files())
    names[&f] = std::filesystem::path(f.path()).filename().string();
  std::string text;
  auto out = std::back_inserter(text);
  for (const auto& [name, ref] : set.tensors()) {
    fmt::format_to(out, "{} {} [", name, to_string(ref.info->dtype));
    for (std::size_t d = 0; d < ref.info->shape.size(); ++d)
      fmt::format_to(out, "{}{}", d == 0 ? "" : ",", ref.info->shape[d]);
    fmt::format_to(out, "] {} {} {}\n", names[ref.file], ref.info->begin, ref.info->end);
  }
  for (const SafetensorsFile& f : set.files())
    for (const auto& [key, value] : f.header().metadata)
      fmt::format_to(out, "metadata {} {} {}\n", names[&f], key, value);
  return text;
}

LayerSpec Checkpoint::layer_spec(int layer) const {
  return impl_->model.moe_spec(layer);
}

LayerWeights Checkpoint::layer_weights(int layer) const {
  return bind_guarded(impl_->slots, [&] {
    LayerWeights w = impl_->model.bind(layer, /*check_values=*/true);
    try {
      validate(impl_->model.moe_spec(layer), w);
    } catch (const std::invalid_argument& e) {
      throw LoadError(fmt::format("{}: layer {}: {}", impl_->model.dir, layer, e.what()));
    }
    return w;
  });
}

void Checkpoint::release_expert_pages(const LayerWeights& weights) const noexcept {
  const auto release = [&](std::span<const std::uint8_t> span) {
    for (const SafetensorsFile& file : impl_->model.tensors.files())
      if (file.drop_resident(span)) return;
  };
  for (const Mxfp4View* view : {&weights.w1, &weights.w2}) {
    if (view->empty()) continue;
    const auto rows = static_cast<std::size_t>(view->rows / view->parts);
    for (std::int64_t e = 0; e < view->experts; ++e)
      for (int p = 0; p < view->parts; ++p) {
        const Mxfp4Segment& s = view->segment(e, p);
        release({s.blocks, rows * static_cast<std::size_t>(view->row_bytes())});
        release({s.scales, rows * static_cast<std::size_t>(view->row_scales())});
      }
  }
}

LayerWeights Checkpoint::layer_weights(int layer, const std::vector<ExpertRange>& experts) const {
  return bind_guarded(impl_->slots, [&] {
    LayerWeights w = impl_->model.bind(layer, /*check_values=*/true, &experts);
    try {
      validate(impl_->model.moe_spec(layer), w, experts);
    } catch (const std::invalid_argument& e) {
      throw LoadError(fmt::format("{}: layer {}: {}", impl_->model.dir, layer, e.what()));
    }
    return w;
  });
}

}  // namespace mxmoe
