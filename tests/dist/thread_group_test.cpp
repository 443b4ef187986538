// The in-process communicator: exchanges deliver exactly what was sent, a rank that does not
// call ends the others' wait within the deadline naming it, and a message of the wrong size
// is an error naming its sender.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>

#include "dist/dist_fixture.hpp"

namespace {

using ::testing::HasSubstr;

// Rank r sends peer p a message of (r * 7 + p * 3) % 5 * 13 bytes (some empty), filled with
// a pattern of (r, p, index); twice to each peer in one round, to check ordering.
std::byte pattern(int from, int to, std::size_t i, int which) {
  return static_cast<std::byte>((from * 31 + to * 17 + which * 101 + static_cast<int>(i)) & 0xFF);
}
std::size_t size_of(int from, int to, int which) {
  return static_cast<std::size_t>((from * 7 + to * 3 + which) % 5 * 13);
}

TEST(ThreadGroup, ExchangeDeliversEveryMessageInOrder) {
  for (int n : {1, 2, 3, 4}) {
    const auto outcomes = dist_test::run_group(n, [n](int rank, mxmoe::Communicator& comm) {
      EXPECT_EQ(comm.rank(), rank);
      EXPECT_EQ(comm.size(), n);
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<std::byte>> out, in;
        std::vector<mxmoe::SendBuffer> sends;
        std::vector<mxmoe::RecvBuffer> recvs;
        out.reserve(2 * static_cast<std::size_t>(n));
        in.reserve(2 * static_cast<std::size_t>(n));
        for (int which = 0; which < 2; ++which)
          for (int p = 0; p < n; ++p) {
            auto& o = out.emplace_back(size_of(rank, p, which + round));
            for (std::size_t i = 0; i < o.size(); ++i) o[i] = pattern(rank, p, i, which + round);
            sends.push_back({p, o.data(), o.size()});
            auto& r = in.emplace_back(size_of(p, rank, which + round));
            recvs.push_back({p, r.data(), r.size()});
          }
        comm.exchange(sends, recvs);
        std::size_t k = 0;
        for (int which = 0; which < 2; ++which)
          for (int p = 0; p < n; ++p, ++k)
            for (std::size_t i = 0; i < in[k].size(); ++i)
              ASSERT_EQ(in[k][i], pattern(p, rank, i, which + round))
                  << "rank " << rank << " from " << p << " message " << which;
      }
      const auto all =
          mxmoe::allgather_strings(comm, std::string(static_cast<std::size_t>(rank), 'x'));
      for (int p = 0; p < n; ++p)
        EXPECT_EQ(all[static_cast<std::size_t>(p)].size(), static_cast<std::size_t>(p));
      mxmoe::barrier(comm);
    });
    for (const auto& o : outcomes) EXPECT_EQ(o.error, "") << n;
  }
}

TEST(ThreadGroup, ARankThatNeverCallsIsNamedWithinTheDeadline) {
  const double deadline = 0.5;
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = dist_test::run_group(4,
                                             [](int rank, mxmoe::Communicator& comm) {
                                               if (rank == 2) return;  // stops answering
                                               mxmoe::barrier(comm);
                                             },
                                             {deadline});
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Bounded, not a hang: the deadline plus scheduling slack (this is a bound on a wait, not
  // a speed measurement).
  EXPECT_GE(elapsed, deadline * 0.9);
  EXPECT_LT(elapsed, deadline + 10.0);
  for (int r : {0, 1, 3}) {
    const auto& o = outcomes[static_cast<std::size_t>(r)];
    EXPECT_TRUE(o.comm_error) << o.error;
    EXPECT_EQ(o.culprits, std::vector<int>{2}) << o.error;
    EXPECT_THAT(o.error, HasSubstr("rank 2 did not answer within 0.5 s"));
  }
  EXPECT_EQ(outcomes[2].error, "");
}

TEST(ThreadGroup, AMessageOfTheWrongSizeNamesItsSenderAndBreaksTheCommunicator) {
  // A ring: rank r sends to r + 1. Rank 2 sends rank 0 four bytes where it expects eight.
  const auto body = [](int rank, mxmoe::Communicator& comm) {
    std::vector<std::byte> out(8), in(8);
    const int to = (rank + 1) % 3, from = (rank + 2) % 3;
    const std::vector<mxmoe::SendBuffer> sends{{to, out.data(), rank == 2 ? 4u : 8u}};
    const std::vector<mxmoe::RecvBuffer> recvs{{from, in.data(), 8}};
    comm.exchange(sends, recvs);
    if (rank == 0) ADD_FAILURE() << "rank 0 accepted a short message";
    mxmoe::barrier(comm);  // the others go on; rank 0 is gone
  };
  const auto outcomes = dist_test::run_group(3, body, {0.5});
  EXPECT_TRUE(outcomes[0].comm_error);
  EXPECT_EQ(outcomes[0].culprits, std::vector<int>{2});
  EXPECT_THAT(outcomes[0].error, HasSubstr("rank 2 sent 4 bytes where 8 were expected"));
  for (int r : {1, 2}) {
    EXPECT_TRUE(outcomes[static_cast<std::size_t>(r)].comm_error);
    EXPECT_EQ(outcomes[static_cast<std::size_t>(r)].culprits, std::vector<int>{0});
  }
}

TEST(ThreadGroup, BadArgumentsAreErrors) {
  EXPECT_THROW(mxmoe::make_thread_group(0), std::invalid_argument);
  EXPECT_THROW(mxmoe::make_thread_group(2, {0.0}), std::invalid_argument);
  auto group = mxmoe::make_thread_group(1);
  std::byte b{};
  const mxmoe::SendBuffer to_nobody{1, &b, 1};
  EXPECT_THROW(group[0]->exchange({&to_nobody, 1}, {}), std::invalid_argument);
}

}  // namespace
