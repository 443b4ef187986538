// Runtimes for tests: one per thread count, made on first use and kept for the whole test
// program (layers hold references to their runtime, so it must outlive every layer).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "mxmoe/layer.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe::testing {

inline Runtime& test_runtime(int threads) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<Runtime>> runtimes;
  std::lock_guard lock(mutex);
  std::unique_ptr<Runtime>& r = runtimes[threads];
  if (!r) r = std::make_unique<Runtime>(threads);
  return *r;
}

// The runtime a layer built from this selection ran on before runtimes were shared: the
// request's threads, else every logical CPU of the deployment's hardware.
inline Runtime& runtime_for(const Selection& s) {
  const Request& r = s.deployment.request;
  return test_runtime(r.threads > 0 ? r.threads : std::max(1, s.deployment.hardware.logical_cpus));
}

// A layer on runtime_for(selection).
inline MoeLayer test_layer(const LayerWeights& weights, Selection selection) {
  Runtime& runtime = runtime_for(selection);
  return MoeLayer(weights, std::move(selection), runtime);
}

}  // namespace mxmoe::testing
