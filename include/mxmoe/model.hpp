// Model: the whole MoE stack of a checkpoint on one Runtime. It opens the directory (mmap,
// headers only), lists which layers are MoE layers mxmoe runs and why the others are not,
// and binds each MoE layer on first use (views on the mapping, the oracle's selection, the
// backend's packing) or all of them at open (ModelOptions::eager).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {

struct MXMOE_API ModelOptions {
  Request request;     // how every layer is judged (activation, batch invariance, backend...)
  bool eager = false;  // bind and pack every MoE layer at open, instead of on first use
};

class MXMOE_API Model {
 public:
  // Opens DIR. Layers are judged on `hardware` with options.request and run on `runtime`,
  // which must outlive the model. Throws LoadError (and, when eager, NoBackendError).
  Model(const std::string& dir, const Hardware& hardware, Runtime& runtime,
        ModelOptions options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const Checkpoint& checkpoint() const noexcept;
  int num_layers() const noexcept;
  std::vector<int> moe_layers() const;       // ascending
  std::string skip_reason(int layer) const;  // "" for a MoE layer, else why it is not run

  // Layer N, bound on first use and kept (thread-safe). Throws LoadError (out of range, not
  // a MoE layer, malformed tensors) or NoBackendError.
  MoeLayer& layer(int index);
  // A new layer N judged with another Request, owned by the caller; it reads the model's
  // mapping, so the model must outlive it.
  MoeLayer bind(int index, const Request& request) const;

  // Layers bound so far and the bytes their backends packed.
  int bound_layers() const;
  std::size_t packed_weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
