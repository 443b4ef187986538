// Running an in-process expert-parallel group in tests: one thread per rank.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mxmoe/communicator.hpp"

namespace dist_test {

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
