// A Runtime's thread pool, for the library's own layers, kernels and tools. mxmoe/runtime.hpp
// keeps it opaque (Runtime::Impl): a host owns Runtimes and hands them to layers, it never
// schedules on the pool itself.
#pragma once

#include <vector>

#include "base/thread_pool.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {

struct Runtime::Impl {
  Impl(int threads, const std::vector<int>& cpu_affinity) : pool(threads, cpu_affinity) {}
  ThreadPool pool;
};

inline ThreadPool& pool_of(const Runtime& runtime) noexcept {
  return runtime.impl().pool;
}

}  // namespace mxmoe
