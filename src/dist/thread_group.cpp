// The in-process communicator: ranks are threads sharing one GroupState. An exchange is a
// rendezvous in two steps (everyone posted its sends; everyone copied what it receives), each
// bounded by the deadline, so a thread that never calls ends the others' wait with a CommError
// naming its rank instead of a hang.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "mxmoe/communicator.hpp"

namespace mxmoe {
namespace {

struct GroupState {
  GroupState(int n, CommOptions o)
      : size(n),
        options(o),
        arrived(static_cast<std::size_t>(n), 0),
        done(static_cast<std::size_t>(n), 0),
        posted(static_cast<std::size_t>(n)) {}
  const int size;
  const CommOptions options;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::uint64_t> arrived, done;  // the last round each rank posted / finished
  std::vector<std::span<const SendBuffer>> posted;
  // Set by the first rank that gives up; every waiting or later call then fails with it.
  bool broken = false;
  std::vector<int> broken_ranks;
  std::string broken_reason;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<GroupState> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return group_->size; }
  const CommOptions& options() const noexcept override { return group_->options; }

  void exchange(std::span<const SendBuffer> sends, std::span<const RecvBuffer> recvs) override {
    GroupState& g = *group_;
    for (const SendBuffer& s : sends) check_peer(s.peer);
    for (const RecvBuffer& r : recvs) check_peer(r.peer);
    const std::uint64_t round = ++round_;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(g.options.deadline_s));
    {
      std::unique_lock lock(g.mutex);
      fail_if_broken();
      g.posted[static_cast<std::size_t>(rank_)] = sends;
      g.arrived[static_cast<std::size_t>(rank_)] = round;
      g.changed.notify_all();
      wait_for_all(lock, g.arrived, round, deadline, "to post its messages");
    }
    // Everyone posted and waits for us to copy: read their buffers without the lock.
    std::vector<int> bad;
    std::string problems;
    std::vector<std::size_t> cursor(static_cast<std::size_t>(g.size), 0);
    const auto next_from = [&](int peer) -> const SendBuffer* {
      const auto& list = g.posted[static_cast<std::size_t>(peer)];
      std::size_t& i = cursor[static_cast<std::size_t>(peer)];
      while (i < list.size() && list[i].peer != rank_) ++i;
      return i < list.size() ? &list[i++] : nullptr;
    };
    const auto fault = [&](int peer, const std::string& what) {
      if (std::find(bad.begin(), bad.end(), peer) == bad.end()) bad.push_back(peer);
      problems += (problems.empty() ? "" : "; ") + what;
    };
    for (const RecvBuffer& r : recvs) {
      const SendBuffer* s = next_from(r.peer);
      if (s == nullptr)
        fault(r.peer,
              fmt::format("rank {} sent no message where {} bytes were expected", r.peer, r.bytes));
      else if (s->bytes != r.bytes)
        fault(r.peer, fmt::format("rank {} sent {} bytes where {} were expected", r.peer, s->bytes,
                                  r.bytes));
      else if (r.bytes > 0)
        std::memcpy(r.data, s->data, r.bytes);
    }
    for (int peer = 0; peer < g.size; ++peer)
      if (next_from(peer) != nullptr)
        fault(peer, fmt::format("rank {} sent more messages than this rank expects", peer));
    {
      std::unique_lock lock(g.mutex);
      g.done[static_cast<std::size_t>(rank_)] = round;
      g.changed.notify_all();
      wait_for_all(lock, g.done, round, deadline, "to finish the exchange");
    }
    if (!bad.empty()) {
      broken_ = true;
      throw CommError(bad, fmt::format("rank {}: exchange {}: {}", rank_, round, problems));
    }
  }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= group_->size)
      throw std::invalid_argument(
          fmt::format("exchange: peer {} outside the group of {}", peer, group_->size));
  }

  void fail_if_broken() {
    if (broken_)
      throw CommError({}, fmt::format("rank {}: the communicator failed earlier", rank_));
    if (group_->broken) {
      broken_ = true;
      throw CommError(group_->broken_ranks,
                      fmt::format("rank {}: {}", rank_, group_->broken_reason));
    }
  }

  // Waits (lock held) until every rank's counter reaches `round`; on the deadline names the
  // ranks that did not, and breaks the group so that every other waiter fails at once too.
  void wait_for_all(std::unique_lock<std::mutex>& lock, const std::vector<std::uint64_t>& counter,
                    std::uint64_t round, std::chrono::steady_clock::time_point deadline,
                    const char* what) {
    GroupState& g = *group_;
    const auto all = [&] {
      return g.broken || std::all_of(counter.begin(), counter.end(),
                                     [&](std::uint64_t c) { return c >= round; });
    };
    if (!g.changed.wait_until(lock, deadline, all)) {
      std::vector<int> missing;
      std::string names;
      for (int r = 0; r < g.size; ++r)
        if (counter[static_cast<std::size_t>(r)] < round) {
          missing.push_back(r);
          names += fmt::format("{}rank {}", names.empty() ? "" : ", ", r);
        }
      g.broken = true;
      g.broken_ranks = missing;
      g.broken_reason = fmt::format("{} did not answer within {:.1f} s (waiting for it {})", names,
                                    g.options.deadline_s, what);
      g.changed.notify_all();
    }
    fail_if_broken();
  }

  std::shared_ptr<GroupState> group_;
  int rank_;
  std::uint64_t round_ = 0;
  bool broken_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int n, CommOptions options) {
  if (n < 1 || !(options.deadline_s > 0))
    throw std::invalid_argument(
        fmt::format("thread group: need n >= 1 and a deadline > 0 s; got n={}, deadline={} s", n,
                    options.deadline_s));
  auto group = std::make_shared<GroupState>(n, options);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return out;
}

}  // namespace mxmoe
