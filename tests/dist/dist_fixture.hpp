// Running an in-process expert-parallel group in tests: one thread per rank.
#pragma once

#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/layer.hpp"

namespace dist_test {

struct Choice {
  std::string backend;
  mxmoe::ActivationFormat format;
};

// Every backend x format that accepts a batch-invariant request for `spec` on `hw`.
inline std::vector<Choice> invariant_choices(const mxmoe::LayerSpec& spec,
                                             const mxmoe::Hardware& hw) {
  std::vector<Choice> out;
  for (const mxmoe::Backend* b : mxmoe::registered_backends())
    for (mxmoe::ActivationFormat f : mxmoe::all_activation_formats()) {
      mxmoe::Deployment d{spec, hw, {}};
      d.request.activation = f;
      d.request.batch_invariant = true;
      if (b->check(d).empty()) out.push_back({std::string(b->name()), f});
    }
  return out;
}

// A batch-invariant request forcing that choice, one thread.
inline mxmoe::Request request_for(const Choice& c) {
  mxmoe::Request r;
  r.activation = c.format;
  r.batch_invariant = true;
  r.forced_backend = c.backend;
  r.threads = 1;
  return r;
}

// The first token whose output bits differ between a and b ([tokens, h]), or -1.
inline std::int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b,
                                     int h) {
  if (a.size() != b.size()) return 0;
  const auto w = static_cast<std::size_t>(h);
  for (std::size_t t = 0; t * w < a.size(); ++t)
    if (std::memcmp(a.data() + t * w, b.data() + t * w, w * sizeof(float)) != 0)
      return static_cast<std::int64_t>(t);
  return -1;
}

struct RankOutcome {
  std::string error;          // what() of the exception the rank threw, "" when none
  std::vector<int> culprits;  // CommError::ranks() when it was a CommError
  bool comm_error = false;
};

// Runs body(rank, comm) on one thread per rank of a fresh group and joins them all.
inline std::vector<RankOutcome> run_group(
    int n, const std::function<void(int, mxmoe::Communicator&)>& body,
    mxmoe::CommOptions options = {}) {
  auto group = mxmoe::make_thread_group(n, options);
  std::vector<RankOutcome> out(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      RankOutcome& o = out[static_cast<std::size_t>(r)];
      try {
        body(r, *group[static_cast<std::size_t>(r)]);
      } catch (const mxmoe::CommError& e) {
        o.error = e.what();
        o.culprits = e.ranks();
        o.comm_error = true;
      } catch (const std::exception& e) {
        o.error = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace dist_test
