// ExpertParallelLayer on in-process groups of 1..4 ranks: every token's output has the bits of
// one process's MoeLayer::forward, for every family, every backend x format that claims batch
// invariance and runs here, contiguous (even and uneven), scattered and empty-rank placements,
// tokens on every rank or only on rank 0. Malformed messages and a rank that stops answering
// are errors naming the rank, never a crash or a hang.
#include "mxmoe/expert_parallel.hpp"

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>

#include "dist/dist_fixture.hpp"
#include "layer/layer_fixture.hpp"
#include "mxmoe/hardware.hpp"
#include "runtime/layer_steps.hpp"

namespace {

using mxmoe::ActivationFormat;
using mxmoe::Placement;
using LayerSteps = mxmoe::MoeLayer::Steps;
using ::testing::HasSubstr;

struct Family {
  const char* preset;
  int experts;
};
// gpt-oss with 32 experts (uneven on 3 ranks: 10, 11, 11), DeepSeek-V3 with a shared expert
// and grouped routing, Qwen3 (softmax then renormalised top-k).
const Family kFamilies[] = {{"gpt-oss-20b", 32}, {"deepseek-v3", 16}, {"qwen3-30b-a3b", 16}};

mxmoe::LayerSpec family_spec(const Family& f) {
  return layer_test::shrink(f.preset, f.experts, 4, 64, 64);
}

// One process, every expert: the reference bits. token_ids: [tokens] for a hash layer.
std::vector<float> single_process(const mxmoe::LayerSpec& spec, const mxmoe::LayerWeights& w,
                                  const mxmoe::Hardware& hw, const mxmoe::Request& r,
                                  const std::vector<float>& x,
                                  const std::vector<std::int32_t>& token_ids = {}) {
  mxmoe::Runtime runtime(2);
  mxmoe::MoeLayer layer(w, mxmoe::select({spec, hw, r}, mxmoe::preferences_for(spec.family)),
                        runtime);
  std::vector<float> y(x.size());
  layer.forward(
      {.tokens = static_cast<std::int64_t>(x.size() / static_cast<std::size_t>(spec.hidden)),
       .x = x.data(),
       .y = y.data(),
       .token_ids = token_ids.empty() ? nullptr : token_ids.data()});
  return y;
}

// Splits `tokens` rows over n ranks: counts[r] rows each, in order.
std::vector<std::int64_t> split(std::int64_t tokens, int n, bool only_rank0, std::mt19937& rng) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n), 0);
  if (only_rank0) {
    counts[0] = tokens;
    return counts;
  }
  for (std::int64_t t = 0; t < tokens; ++t)
    ++counts[std::uniform_int_distribution<std::size_t>(0, static_cast<std::size_t>(n) - 1)(rng)];
  return counts;
}

// Runs the group; returns the concatenated outputs of ranks 0..n-1 (rows in input order).
std::vector<float> expert_parallel(const mxmoe::LayerSpec& spec, const mxmoe::LayerWeights& w,
                                   const mxmoe::Hardware& hw, const mxmoe::Request& r,
                                   const Placement& placement, const std::vector<float>& x,
                                   const std::vector<std::int64_t>& counts,
                                   std::vector<std::string>* chosen = nullptr,
                                   const std::vector<std::int32_t>& token_ids = {}) {
  const int n = static_cast<int>(counts.size());
  const auto h = static_cast<std::size_t>(spec.hidden);
  std::vector<std::size_t> first(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i)
    first[i + 1] = first[i] + static_cast<std::size_t>(counts[i]);
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::string> names(counts.size());
  const auto outcomes = dist_test::run_group(n, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    auto layer = mxmoe::ExpertParallelLayer::create(spec, w, hw, r, placement, runtime, comm);
    names[static_cast<std::size_t>(rank)] = layer.selection().chosen;
    const std::size_t row = first[static_cast<std::size_t>(rank)];
    const auto at = row * h;
    const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data() + row;
    layer.forward(x.data() + at, ids, counts[static_cast<std::size_t>(rank)], y.data() + at);
  });
  for (int rank = 0; rank < n; ++rank)
    EXPECT_EQ(outcomes[static_cast<std::size_t>(rank)].error, "") << "rank " << rank;
  if (chosen != nullptr) *chosen = names;
  return y;
}

TEST(ExpertParallel, EveryTokensBitsMatchOneProcessForAnyEpSize) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  std::mt19937 rng(5);
  int cases = 0;
  for (const Family& family : kFamilies) {
    const mxmoe::LayerSpec spec = family_spec(family);
    const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 11);
    const std::int64_t tokens = 23;
    const std::vector<float> x = layer_test::random_input(spec, tokens, 12);
    for (const dist_test::Choice& c : dist_test::invariant_choices(spec, hw)) {
      const mxmoe::Request r = dist_test::request_for(c);
      const std::vector<float> want = single_process(spec, storage.weights(), hw, r, x);
      for (int n : {1, 2, 3, 4})
        for (bool only_rank0 : {true, false}) {
          SCOPED_TRACE(fmt::format("{} on {} ({}), {} ranks, tokens on {}", spec.name, c.backend,
                                   mxmoe::to_string(c.format), n,
                                   only_rank0 ? "rank 0" : "every rank"));
          std::vector<std::string> chosen;
          const std::vector<float> got = expert_parallel(
              spec, storage.weights(), hw, r, Placement::contiguous(spec.num_experts, n), x,
              split(tokens, n, only_rank0, rng), &chosen);
          for (const std::string& name : chosen) EXPECT_EQ(name, c.backend);
          EXPECT_EQ(dist_test::first_difference(got, want, spec.hidden), -1);
          ++cases;
        }
    }
  }
  EXPECT_GE(cases, 3 * 4 * 2 * 4);  // at least the reference backend's four formats
}

// DeepSeek-V4 as published: sqrt(softplus) routing with an FP8 E4M3 shared expert, and its
// hash-routed first layers, whose experts come from each token's id (the ids travel with the
// tokens: each rank passes its own).
TEST(ExpertParallel, DeepSeekV4LayersKeepTheirBitsForAnyEpSize) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  std::mt19937 rng(41);
  int cases = 0;
  for (const char* preset : {"deepseek-v4-flash", "deepseek-v4-flash-hash"}) {
    mxmoe::LayerSpec spec = layer_test::shrink(preset, 16, 3, 128, 64);
    if (spec.routing == mxmoe::RoutingMethod::hash) spec.vocab = 97;
    ASSERT_EQ(spec.shared_weight_format, mxmoe::ElementType::fp8_e4m3);
    const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 42);
    const std::int64_t tokens = 21;
    const std::vector<float> x = layer_test::random_input(spec, tokens, 43);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
    for (std::int32_t& id : ids) id = std::uniform_int_distribution<std::int32_t>(0, 96)(rng);
    const bool hash = spec.routing == mxmoe::RoutingMethod::hash;
    for (const dist_test::Choice& c : dist_test::invariant_choices(spec, hw)) {
      const mxmoe::Request r = dist_test::request_for(c);
      const std::vector<float> want = single_process(spec, storage.weights(), hw, r, x, ids);
      for (int n : {1, 2, 3, 4})
        for (bool only_rank0 : {true, false}) {
          SCOPED_TRACE(fmt::format("{} on {} ({}), {} ranks, tokens on {}", spec.name, c.backend,
                                   mxmoe::to_string(c.format), n,
                                   only_rank0 ? "rank 0" : "every rank"));
          const std::vector<float> got = expert_parallel(
              spec, storage.weights(), hw, r, Placement::contiguous(spec.num_experts, n), x,
              split(tokens, n, only_rank0, rng), nullptr, ids);
          EXPECT_EQ(dist_test::first_difference(got, want, spec.hidden), -1);
          ++cases;
        }
    }
    if (hash) {
      // Without ids every rank refuses alike, naming the reason (none waits for the others).
      const auto outcomes = dist_test::run_group(2, [&](int, mxmoe::Communicator& comm) {
        mxmoe::Runtime runtime(1);
        mxmoe::Request r;
        r.threads = 1;
        auto layer = mxmoe::ExpertParallelLayer::create(spec, storage.weights(), hw, r, Placement{},
                                                        runtime, comm);
        std::vector<float> y(x.size());
        layer.forward(x.data(), 0, y.data());
      });
      for (const auto& o : outcomes) EXPECT_THAT(o.error, HasSubstr("pass the tokens' ids"));
    }
  }
  EXPECT_GE(cases, 2 * 4 * 2 * 4);
}

TEST(ExpertParallel, AnyPlacementGivesTheSameBits) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[1]);  // DeepSeek: shared expert
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 21);
  const std::int64_t tokens = 19;
  const std::vector<float> x = layer_test::random_input(spec, tokens, 22);
  mxmoe::Request r;
  r.batch_invariant = true;
  r.threads = 1;
  const std::vector<float> want = single_process(spec, storage.weights(), hw, r, x);
  std::mt19937 rng(23);
  std::vector<int> scattered(static_cast<std::size_t>(spec.num_experts));
  for (int& owner : scattered) owner = std::uniform_int_distribution<int>(0, 2)(rng);
  std::vector<int> one_rank_empty(static_cast<std::size_t>(spec.num_experts));
  for (std::size_t e = 0; e < one_rank_empty.size(); ++e) one_rank_empty[e] = e % 2 == 0 ? 0 : 2;
  for (const Placement& p : {Placement(scattered, 3), Placement(one_rank_empty, 3),
                             Placement(std::vector<int>(16, 3), 4)}) {
    SCOPED_TRACE(mxmoe::to_json(p));
    for (bool only_rank0 : {true, false}) {
      const auto got = expert_parallel(spec, storage.weights(), hw, r, p, x,
                                       split(tokens, p.ranks(), only_rank0, rng));
      EXPECT_EQ(dist_test::first_difference(got, want, spec.hidden), -1);
    }
  }
}

TEST(ExpertParallel, RepeatedCallsAndEmptyCallsKeepTheBitsAndStopAllocating) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[0]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 31);
  const std::vector<float> x = layer_test::random_input(spec, 8, 32);
  mxmoe::Request r;
  r.threads = 1;
  const std::vector<float> want = single_process(spec, storage.weights(), hw, r, x);
  const auto outcomes = dist_test::run_group(3, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    auto layer = mxmoe::ExpertParallelLayer::create(spec, storage.weights(), hw, r, Placement{},
                                                    runtime, comm);
    EXPECT_EQ(layer.local().placement(), Placement::contiguous(spec.num_experts, 3));
    std::vector<float> y(x.size());
    for (int call = 0; call < 4; ++call) {
      layer.forward(nullptr, 0, nullptr);  // nobody has tokens
      const std::uint64_t before = layer.local().workspace_allocations();
      layer.forward(x.data(), rank == 1 ? 8 : 0, y.data());
      if (call > 0) {
        EXPECT_EQ(layer.local().workspace_allocations(), before);
      }
      if (rank == 1) {
        EXPECT_EQ(dist_test::first_difference(y, want, spec.hidden), -1) << "call " << call;
      }
    }
    EXPECT_EQ(layer.times().calls, 8);
    EXPECT_GT(layer.times().bytes_sent + layer.times().bytes_received, 0u);
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.error, "");
}

// Each rank packs about 1/N of the experts: the parts add up to the whole.
TEST(ExpertParallel, EachRankPacksOnlyItsExperts) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[0]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 41);
  for (const dist_test::Choice& c : dist_test::invariant_choices(spec, hw)) {
    const mxmoe::Request r = dist_test::request_for(c);
    mxmoe::Runtime runtime(1);
    const mxmoe::MoeLayer whole(storage.weights(),
                                mxmoe::select({spec, hw, r}, mxmoe::preferences_for(spec.family)),
                                runtime);
    if (whole.packed_weight_bytes() == 0) continue;  // reads the views: nothing to count
    SCOPED_TRACE(c.backend);
    for (int n : {2, 3, 4}) {
      std::vector<std::size_t> bytes(static_cast<std::size_t>(n));
      const auto outcomes = dist_test::run_group(n, [&](int rank, mxmoe::Communicator& comm) {
        mxmoe::Runtime rt(1);
        auto layer = mxmoe::ExpertParallelLayer::create(spec, storage.weights(), hw, r, Placement{},
                                                        rt, comm);
        bytes[static_cast<std::size_t>(rank)] = layer.local().packed_weight_bytes();
      });
      std::size_t sum = 0;
      for (int rank = 0; rank < n; ++rank) {
        const double share =
            static_cast<double>(Placement::contiguous(spec.num_experts, n).count(rank)) /
            spec.num_experts;
        EXPECT_NEAR(static_cast<double>(bytes[static_cast<std::size_t>(rank)]),
                    share * static_cast<double>(whole.packed_weight_bytes()),
                    0.02 * static_cast<double>(whole.packed_weight_bytes()))
            << "rank " << rank << " of " << n;
        sum += bytes[static_cast<std::size_t>(rank)];
      }
      EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(whole.packed_weight_bytes()),
                  0.02 * static_cast<double>(whole.packed_weight_bytes()));
    }
  }
}

// A decorator that rewrites the messages one rank sends to another in one exchange.
class Tampering final : public mxmoe::Communicator {
 public:
  using Edit = std::function<void(std::vector<std::byte>& message, std::size_t index)>;
  Tampering(mxmoe::Communicator& inner, int victim, int exchange_index, Edit edit)
      : inner_(inner), victim_(victim), target_(exchange_index), edit_(std::move(edit)) {}
  int rank() const noexcept override { return inner_.rank(); }
  int size() const noexcept override { return inner_.size(); }
  const mxmoe::CommOptions& options() const noexcept override { return inner_.options(); }
  void arm() { armed_ = true; }
  void exchange(std::span<const mxmoe::SendBuffer> sends,
                std::span<const mxmoe::RecvBuffer> recvs) override {
    if (!armed_ || ++seen_ != target_) return inner_.exchange(sends, recvs);
    std::vector<std::vector<std::byte>> copies;
    copies.reserve(sends.size());
    std::vector<mxmoe::SendBuffer> edited(sends.begin(), sends.end());
    std::size_t index = 0;
    for (mxmoe::SendBuffer& s : edited) {
      if (s.peer != victim_) continue;
      copies.emplace_back(s.data, s.data + s.bytes);
      edit_(copies.back(), index++);
      s.data = copies.back().data();
      s.bytes = copies.back().size();
    }
    inner_.exchange(edited, recvs);
  }

 private:
  mxmoe::Communicator& inner_;
  int victim_, target_, seen_ = 0;
  Edit edit_;
  bool armed_ = false;
};

template <class T>
void poke(std::vector<std::byte>& m, std::size_t element, T value) {
  ASSERT_GE(m.size(), (element + 1) * sizeof(T));
  std::memcpy(m.data() + element * sizeof(T), &value, sizeof(T));
}

// Rank 1 sends rank 0 something malformed in the first forward call: exchange 1 carries the
// counts {call, rows, slots}, exchange 2 the slots {expert, row} then the rows.
struct Malformation {
  const char* name;
  int exchange;
  Tampering::Edit edit;
  const char* message;  // what rank 0 says
};

TEST(ExpertParallel, MalformedMessagesAreErrorsNamingTheSender) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[0]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 51);
  const std::vector<float> x = layer_test::random_input(spec, 6, 52);
  mxmoe::Request r;
  r.threads = 1;
  const Malformation cases[] = {
      {"call number", 1, [](auto& m, std::size_t) { poke<std::uint32_t>(m, 0, 7); },
       "rank 1 is at layer call 7"},
      {"more rows than slots", 1, [](auto& m, std::size_t) { poke<std::uint32_t>(m, 1, 50); },
       "rank 1 sent a malformed message"},
      {"absurd slot count", 1,
       [](auto& m, std::size_t) {
         poke<std::uint32_t>(m, 1, 0x7FFFFFFF);
         poke<std::uint32_t>(m, 2, 0xFFFFFFFF);
       },
       "rank 1 sent a malformed message"},
      {"more slots than sent", 1,
       [](auto& m, std::size_t) {
         std::uint32_t slots;
         std::memcpy(&slots, m.data() + 8, 4);
         poke<std::uint32_t>(m, 2, slots + 1);
       },
       "rank 1 sent"},
      {"expert out of range", 2,
       [](auto& m, std::size_t i) {
         if (i == 0) poke<std::int32_t>(m, 0, 999);
       },
       "names expert 999"},
      {"expert of another rank", 2,
       [](auto& m, std::size_t i) {
         if (i == 0) poke<std::int32_t>(m, 0, 31);  // rank 0 holds experts 0..15 of 32
       },
       "names expert 31, which rank 0 does not hold"},
      {"row out of range", 2,
       [](auto& m, std::size_t i) {
         if (i == 0) poke<std::int32_t>(m, 1, -5);
       },
       "reads row -5"},
  };
  for (const Malformation& c : cases) {
    SCOPED_TRACE(c.name);
    const auto outcomes =
        dist_test::run_group(2,
                             [&](int rank, mxmoe::Communicator& comm) {
                               Tampering tampering(comm, /*victim=*/0, c.exchange, c.edit);
                               mxmoe::Communicator& used =
                                   rank == 1 ? static_cast<mxmoe::Communicator&>(tampering) : comm;
                               mxmoe::Runtime runtime(1);
                               auto layer = mxmoe::ExpertParallelLayer::create(
                                   spec, storage.weights(), hw, r, Placement{}, runtime, used);
                               tampering.arm();
                               std::vector<float> y(x.size());
                               // Every token on rank 1, so that rank 0 receives slots of its
                               // experts.
                               layer.forward(x.data(), rank == 1 ? 6 : 0, y.data());
                             },
                             {1.0});
    EXPECT_TRUE(outcomes[0].comm_error) << outcomes[0].error;
    EXPECT_EQ(outcomes[0].culprits, std::vector<int>{1}) << outcomes[0].error;
    EXPECT_THAT(outcomes[0].error, HasSubstr(c.message));
    EXPECT_NE(outcomes[1].error, "");  // rank 1 learns that rank 0 is gone
  }
}

TEST(ExpertParallel, ARankThatStopsAnsweringEndsTheCallNamingIt) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[2]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 61);
  const std::vector<float> x = layer_test::random_input(spec, 5, 62);
  mxmoe::Request r;
  r.threads = 1;
  const auto outcomes =
      dist_test::run_group(4,
                           [&](int rank, mxmoe::Communicator& comm) {
                             mxmoe::Runtime runtime(1);
                             auto layer = mxmoe::ExpertParallelLayer::create(
                                 spec, storage.weights(), hw, r, Placement{}, runtime, comm);
                             std::vector<float> y(x.size());
                             layer.forward(x.data(), 5, y.data());
                             if (rank == 3) return;  // dies after the first call
                             layer.forward(x.data(), 5, y.data());
                           },
                           {0.5});
  for (int rank = 0; rank < 3; ++rank) {
    const auto& o = outcomes[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(o.comm_error) << o.error;
    EXPECT_EQ(o.culprits, std::vector<int>{3}) << o.error;
    EXPECT_THAT(o.error, HasSubstr("rank 3 did not answer"));
  }
}

// Ranks started with different weights (another seed, layer or checkpoint: an MPMD launch, a
// stale copy on one host) would combine silently wrong outputs: every rank refuses instead.
TEST(ExpertParallel, RanksHoldingDifferentWeightsAreRefused) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[1]);
  const mxmoe::LayerStorage a = mxmoe::LayerStorage::random(spec, 81);
  const mxmoe::LayerStorage b = mxmoe::LayerStorage::random(spec, 82);
  mxmoe::Request r;
  r.threads = 1;
  const auto outcomes = dist_test::run_group(3, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    (void)mxmoe::ExpertParallelLayer::create(spec, rank == 1 ? b.weights() : a.weights(), hw, r,
                                             Placement{}, runtime, comm);
  });
  for (const auto& o : outcomes) {
    EXPECT_THAT(o.error, HasSubstr("the ranks hold different weights"));
    EXPECT_THAT(o.error, HasSubstr("rank 1's differ from rank 0's in the layer's shape, router"));
  }
  // The same weights on every rank build.
  const auto fine = dist_test::run_group(3, [&](int, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    (void)mxmoe::ExpertParallelLayer::create(spec, a.weights(), hw, r, Placement{}, runtime, comm);
  });
  for (const auto& o : fine) EXPECT_EQ(o.error, "");
}

// Issue 38: two quantizations of one model (scale rules floor and round_up) share the router,
// so the router digest alone let them run as the ranks of one group: exit 0, an output that
// matched neither. The digest samples every expert's weights too.
TEST(ExpertParallel, RanksWithTheSameRouterButOtherExpertsAreRefused) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[1]);
  const mxmoe::LayerStorage a = mxmoe::LayerStorage::random(spec, 81);
  const mxmoe::LayerStorage b = mxmoe::LayerStorage::random(spec, 82);
  mxmoe::LayerWeights other_experts = a.weights();
  other_experts.w2 = b.weights().w2;  // the router, biases and w1 of A
  mxmoe::Request r;
  r.threads = 1;
  const auto outcomes = dist_test::run_group(2, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    (void)mxmoe::ExpertParallelLayer::create(spec, rank == 1 ? other_experts : a.weights(), hw, r,
                                             Placement{}, runtime, comm);
  });
  for (const auto& o : outcomes) {
    EXPECT_THAT(o.error, HasSubstr("the ranks hold different weights"));
    EXPECT_THAT(o.error,
                HasSubstr("rank 1's differ from rank 0's in the sampled bytes of experts"));
  }
}

// Issue 38: the digest sampled expert 0 only, so a checkpoint that differs in another expert
// was combined. Every expert is sampled now; the message names the one that differs, and a
// rank that does not hold it refuses too.
TEST(ExpertParallel, RanksWhoseOneExpertDiffersAreRefusedNamingIt) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[1]);
  ASSERT_GT(spec.num_experts, 5);
  const mxmoe::LayerStorage a = mxmoe::LayerStorage::random(spec, 81);
  const mxmoe::LayerStorage b = mxmoe::LayerStorage::random(spec, 82);
  const mxmoe::Mxfp4View& w1 = a.weights().w1;
  std::vector<mxmoe::Mxfp4Segment> table = *w1.segments;
  for (int p = 0; p < w1.parts; ++p)
    table[static_cast<std::size_t>((w1.first + 5) * w1.parts + p)] = b.weights().w1.segment(5, p);
  mxmoe::LayerWeights other_expert_5 = a.weights();
  other_expert_5.w1 =
      mxmoe::Mxfp4View::segmented(std::move(table), w1.parts, w1.experts, w1.rows, w1.cols);
  mxmoe::Request r;
  r.threads = 1;
  const auto outcomes = dist_test::run_group(3, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    (void)mxmoe::ExpertParallelLayer::create(spec, rank == 2 ? other_expert_5 : a.weights(), hw, r,
                                             Placement{}, runtime, comm);
  });
  for (const auto& o : outcomes)
    EXPECT_THAT(o.error, HasSubstr("rank 2's differ from rank 0's in the sampled bytes of expert "
                                   "5 (1 of " +
                                   std::to_string(spec.num_experts) + ")"));
}

TEST(ExpertParallel, ARankThatCannotBuildItsPartStopsEveryRank) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[0]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 71);
  mxmoe::LayerWeights no_router = storage.weights();
  no_router.router_weight = {};
  no_router.router_bias = {};
  mxmoe::Request r;
  r.threads = 1;
  const auto outcomes = dist_test::run_group(3, [&](int rank, mxmoe::Communicator& comm) {
    mxmoe::Runtime runtime(1);
    (void)mxmoe::ExpertParallelLayer::create(spec, rank == 2 ? no_router : storage.weights(), hw, r,
                                             Placement{}, runtime, comm);
  });
  for (const auto& o : outcomes)
    EXPECT_THAT(o.error, HasSubstr("rank 2: an expert-parallel layer routes with the layer's "
                                   "router"));
}

// forward()'s steps (MoeLayer::Steps) compose to forward(), bit for bit, and refuse bad input.
TEST(MoeLayerSteps, RouteComputeSharedCombineIsForward) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[1]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 81);
  const std::int64_t tokens = 9;
  const auto x = layer_test::random_input(spec, tokens, 82);
  mxmoe::Runtime runtime(2);
  mxmoe::MoeLayer layer(storage.weights(),
                        mxmoe::select({spec, hw, {}}, mxmoe::preferences_for(spec.family)),
                        runtime);
  std::vector<float> want(x.size());
  layer.forward({.tokens = tokens, .x = x.data(), .y = want.data()});
  const auto k = static_cast<std::size_t>(spec.top_k), h = static_cast<std::size_t>(spec.hidden);
  const std::size_t slots = static_cast<std::size_t>(tokens) * k;
  std::vector<std::int32_t> ids(slots), rows(slots);
  std::vector<float> w(slots), out(slots * h), shared(x.size()), y(x.size());
  LayerSteps::route(layer, x.data(), nullptr, tokens, ids.data(), w.data());
  // The slots in reverse order, each reading its token's row.
  std::vector<std::int32_t> rev_ids(slots), rev_rows(slots);
  for (std::size_t s = 0; s < slots; ++s) {
    rev_ids[s] = ids[slots - 1 - s];
    rev_rows[s] = static_cast<std::int32_t>((slots - 1 - s) / k);
  }
  std::vector<float> rev_out(slots * h);
  LayerSteps::compute_slots(layer, x.data(), tokens, rev_ids.data(), rev_rows.data(),
                            static_cast<std::int64_t>(slots), rev_out.data());
  for (std::size_t s = 0; s < slots; ++s)
    std::memcpy(out.data() + s * h, rev_out.data() + (slots - 1 - s) * h, h * sizeof(float));
  ASSERT_TRUE(LayerSteps::shared_expert(layer, x.data(), tokens, shared.data()));
  LayerSteps::combine(layer, w.data(), out.data(), shared.data(), tokens, y.data());
  EXPECT_EQ(dist_test::first_difference(y, want, spec.hidden), -1);

  rev_ids[3] = spec.num_experts;
  EXPECT_THROW(LayerSteps::compute_slots(layer, x.data(), tokens, rev_ids.data(), rev_rows.data(),
                                         static_cast<std::int64_t>(slots), rev_out.data()),
               std::invalid_argument);
  rev_ids[3] = 0;
  rev_rows[5] = static_cast<std::int32_t>(tokens);
  EXPECT_THROW(LayerSteps::compute_slots(layer, x.data(), tokens, rev_ids.data(), rev_rows.data(),
                                         static_cast<std::int64_t>(slots), rev_out.data()),
               std::invalid_argument);
}

TEST(MoeLayerSteps, APartialLayerRefusesForwardAndForeignExperts) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::LayerSpec spec = family_spec(kFamilies[0]);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 91);
  mxmoe::Request r;
  r.ep_size = 3;
  r.ep_rank = 1;  // experts [10, 21)
  mxmoe::Runtime runtime(1);
  mxmoe::MoeLayer part(storage.weights(),
                       mxmoe::select({spec, hw, r}, mxmoe::preferences_for(spec.family)), runtime);
  EXPECT_EQ(part.placement().experts_of(part.ep_rank()).front(), 10);
  const auto x = layer_test::random_input(spec, 1, 92);
  std::vector<float> y(x.size());
  EXPECT_THAT([&] { part.forward({.tokens = 1, .x = x.data(), .y = y.data()}); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("holds 11 of its 32")));
  const std::int32_t foreign = 9, row = 0;
  EXPECT_THAT([&] { LayerSteps::compute_slots(part, x.data(), 1, &foreign, &row, 1, y.data()); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("names expert 9, which rank 1 does not hold")));
  const std::int32_t mine = 10;
  EXPECT_NO_THROW(LayerSteps::compute_slots(part, x.data(), 1, &mine, &row, 1, y.data()));
}

}  // namespace
