// Runtime: the execution context that every layer and model of a process shares. It owns
// one thread pool (the calling thread plus threads-1 workers, optionally pinned to CPUs);
// layers take it by reference, so two layers never run two pools against each other.
//
// One job at a time uses the workers: a layer called while another call holds the pool
// (another host thread) computes on its own calling thread instead of waiting. Results
// never depend on the thread count, so both calls give the same bits either way.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"  // kMaxThreads

namespace mxmoe {

// A layer call abandoned because the runtime's interrupt check asked for it (Ctrl-C in
// Python): its output is unspecified, the layer stays usable.
class MXMOE_API Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// The logical CPUs this process may run on (its affinity mask), at most kMaxThreads: what
// threads = 0 means for a Runtime, `mxmoe run --threads 0` and `mxmoe bench --threads 0`.
MXMOE_API int default_thread_count() noexcept;

struct MXMOE_API RuntimeOptions {
  int threads = 0;  // 0: default_thread_count(); else 1..kMaxThreads (more than
                    // the CPUs is allowed and logged as a warning)
  // Optional: worker t (1..threads-1) runs on CPU cpu_affinity[t % size()]. The calling
  // thread (t = 0) belongs to the host and is never pinned.
  std::vector<int> cpu_affinity;
};

class MXMOE_API Runtime {
 public:
  // Throws std::invalid_argument for threads outside [0, kMaxThreads] or a negative CPU.
  explicit Runtime(RuntimeOptions options = {});
  explicit Runtime(int threads) : Runtime(RuntimeOptions{threads, {}}) {}
  ~Runtime();
  Runtime(const Runtime&) = delete;  // layers hold references to it
  Runtime& operator=(const Runtime&) = delete;

  int threads() const noexcept;
  const RuntimeOptions& options() const noexcept;

  // Optional, set before any layer is called (never while one runs). A layer call's own thread
  // polls CHECK between the call's units of work, at most every 10 ms; once it returns true,
  // the rest of the work is skipped and the call throws Interrupted. CHECK runs on every host
  // thread that calls a layer of this runtime: it answers for its own thread, and once true it
  // stays true on that thread until the call has thrown. Python's binding sets one that runs
  // the interpreter's signal handlers, so Ctrl-C ends a long call soon.
  void set_interrupt_check(std::function<bool()> check);
  // The runtime's own state (its thread pool), which only the library's layers and kernels
  // use: declared here, defined inside the library.
  struct Impl;
  Impl& impl() const noexcept;

 private:
  RuntimeOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The runtimes of one host, one per thread count, made on first use and shared: every layer
// the host binds with the same thread count runs on one pool. A runtime lives while a holder
// of its shared_ptr does (the layers that run on it), so the last layer of a thread count
// takes its workers with it. The C API's machine and the Python package each keep one.
// Thread-safe.
class MXMOE_API RuntimeCache {
 public:
  // CONFIGURE (optional) runs once on each runtime made, before anyone else sees it: Python's
  // sets its interrupt check there.
  explicit RuntimeCache(std::function<void(Runtime&)> configure = {});
  RuntimeCache(const RuntimeCache&) = delete;
  RuntimeCache& operator=(const RuntimeCache&) = delete;

  // The runtime of THREADS workers (0: default_thread_count(), the same runtime as that
  // count); throws std::invalid_argument outside [0, kMaxThreads].
  std::shared_ptr<Runtime> get(int threads);

 private:
  std::function<void(Runtime&)> configure_;
  std::mutex mutex_;  // guards runtimes_
  std::map<int, std::weak_ptr<Runtime>> runtimes_;
};

}  // namespace mxmoe
