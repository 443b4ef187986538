// Expert parallelism over MPI, run by ctest as `mpirun -n N test_mpi` for N = 1, 2, 3, 4:
// on generated checkpoints of gpt-oss, DeepSeek-V3 (shared expert) and Qwen3, every token's
// output has the bits of one process's MoeLayer for every backend x format that claims batch
// invariance and runs here, with tokens on rank 0 and tokens on every rank; each rank's
// resident memory grows by about its share of the layer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "dist/dist_fixture.hpp"
#include "dist/mpi/mpi.hpp"
#include "mpi/family_checkpoints.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/hardware.hpp"
#include "perf/memory.hpp"

namespace {

using mxmoe::Placement;

mxmoe::CommOptions test_options() {
  return {120};  // generous: ranks share two cores with other tests
}

// A directory rank 0 creates (and removes at the end), named on every rank.
class SharedDir {
 public:
  explicit SharedDir(mxmoe::Communicator& comm) : comm_(comm) {
    std::string path;
    if (comm.rank() == 0) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "mxmoe_mpi_XXXXXX").string();
      path = ::mkdtemp(tmpl.data());
    }
    path_ = mxmoe::allgather_strings(comm, path)[0];
  }
  ~SharedDir() {
    try {
      mxmoe::barrier(comm_);
    } catch (...) {
    }
    if (comm_.rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  mxmoe::Communicator& comm_;
  std::string path_;
};

std::vector<float> input(const mxmoe::LayerSpec& spec, std::int64_t tokens, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  for (float& v : x) v = normal(rng);
  return x;
}

TEST(MpiExpertParallel, EveryTokensBitsMatchOneProcessOnEveryFamilyCheckpoint) {
  const auto comm = mxmoe::mpi::world(test_options());
  const int n = comm->size(), me = comm->rank();
  SharedDir root(*comm);
  std::vector<mpi_test::FamilyCheckpoint> families;
  if (me == 0) families = mpi_test::write_family_checkpoints(root.path(), 16, 64, 64);
  mxmoe::barrier(*comm);
  if (me != 0)
    for (const char* name : {"gpt-oss", "deepseek-v3", "qwen3"})
      families.push_back({name, root.path() + "/" + name});

  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  int cases = 0;
  for (const mpi_test::FamilyCheckpoint& f : families) {
    const mxmoe::Checkpoint checkpoint = mxmoe::Checkpoint::open(f.dir);
    const mxmoe::LayerSpec spec = checkpoint.layer_spec(0);
    const mxmoe::LayerWeights all = checkpoint.layer_weights(0);
    // 29 tokens in all; rank r's share when every rank has tokens: rows [first[r], first[r+1]).
    const std::int64_t tokens = 29;
    const std::vector<float> x = input(spec, tokens, 100);
    std::vector<std::int64_t> first(static_cast<std::size_t>(n) + 1);
    for (int r = 0; r <= n; ++r) first[static_cast<std::size_t>(r)] = tokens * r / n;
    for (const dist_test::Choice& c : dist_test::invariant_choices(spec, hw)) {
      SCOPED_TRACE(f.name + " on " + c.backend + " (" + std::string(mxmoe::to_string(c.format)) +
                   "), " + std::to_string(n) + " ranks, rank " + std::to_string(me));
      const mxmoe::Request request = dist_test::request_for(c);
      mxmoe::Runtime runtime(1);
      // One process with every expert: the bits to match.
      mxmoe::MoeLayer whole(
          all, mxmoe::select({spec, hw, request}, mxmoe::preferences_for(spec.family)), runtime);
      std::vector<float> want(x.size());
      whole.forward({.tokens = tokens, .x = x.data(), .y = want.data()});
      // This rank's experts only.
      const Placement placement = Placement::contiguous(spec.num_experts, n);
      const mxmoe::LayerWeights mine = checkpoint.layer_weights(0, placement.runs(me));
      auto layer =
          mxmoe::ExpertParallelLayer::create(spec, mine, hw, request, placement, runtime, *comm);
      EXPECT_EQ(layer.selection().chosen, c.backend);
      // Tokens on rank 0 only (the CLI's case).
      std::vector<float> y(x.size(), -1.0f);
      layer.forward(x.data(), me == 0 ? tokens : 0, y.data());
      if (me == 0) {
        EXPECT_EQ(dist_test::first_difference(y, want, spec.hidden), -1);
      }
      // Tokens on every rank.
      const auto lo = static_cast<std::size_t>(first[static_cast<std::size_t>(me)]);
      const auto hi = static_cast<std::size_t>(first[static_cast<std::size_t>(me) + 1]);
      const auto h = static_cast<std::size_t>(spec.hidden);
      std::vector<float> part(x.begin() + static_cast<std::ptrdiff_t>(lo * h),
                              x.begin() + static_cast<std::ptrdiff_t>(hi * h));
      std::vector<float> got(part.size(), -1.0f);
      layer.forward(part.data(), static_cast<std::int64_t>(hi - lo), got.data());
      const std::vector<float> want_part(want.begin() + static_cast<std::ptrdiff_t>(lo * h),
                                         want.begin() + static_cast<std::ptrdiff_t>(hi * h));
      EXPECT_EQ(dist_test::first_difference(got, want_part, spec.hidden), -1);
      ++cases;
    }
  }
  EXPECT_GE(cases, 3 * 4);  // at least the reference backend's four formats per family
}

// A rank reads, checks and packs only its experts: its resident memory grows by its share of
// the expert bytes (the mmapped pages it touches, plus what its backend packs), not the layer.
TEST(MpiMemory, EachRankHoldsAboutItsShareOfTheLayer) {
  const auto comm = mxmoe::mpi::world(test_options());
  const int n = comm->size(), me = comm->rank();
  SharedDir root(*comm);
  mxmoe::testing_io::Dims d;
  d.experts = 32;
  d.top_k = 4;
  d.hidden = 1024;
  d.intermediate = 1024;
  d.layers = 1;
  if (me == 0) mxmoe::testing_io::write_gpt_oss_checkpoint(root.path(), d, false, 5);
  mxmoe::barrier(*comm);

  const mxmoe::Checkpoint checkpoint = mxmoe::Checkpoint::open(root.path());
  const mxmoe::LayerSpec spec = checkpoint.layer_spec(0);
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  mxmoe::Runtime runtime(1);
  const Placement placement = Placement::contiguous(spec.num_experts, n);
  const std::uint64_t before = mxmoe::perf::resident_bytes();
  const mxmoe::LayerWeights mine = checkpoint.layer_weights(0, placement.runs(me));
  mxmoe::Request request;
  request.threads = 1;
  auto layer =
      mxmoe::ExpertParallelLayer::create(spec, mine, hw, request, placement, runtime, *comm);
  const std::vector<float> x = input(spec, 16, 7);
  std::vector<float> y(x.size());
  layer.forward(x.data(), me == 0 ? 16 : 0, y.data());
  const std::uint64_t grown =
      mxmoe::perf::resident_bytes() - std::min(mxmoe::perf::resident_bytes(), before);

  const double layer_bytes =
      static_cast<double>(mine.w1.bytes() + mine.w2.bytes()) +
      2.0 * static_cast<double>(mine.b1.rows * mine.b1.cols + mine.b2.rows * mine.b2.cols);
  const double share = static_cast<double>(placement.count(me)) / spec.num_experts;
  // What the backend packed (it packs this rank's experts only: tests/dist checks the bytes).
  const double packed = static_cast<double>(layer.local().packed_weight_bytes());
  // Router (BF16 + its float copy), workspace, thread stacks, allocator and MPI buffers: a
  // few MB whatever the layer. With 4 ranks the bound is 13.4 MB + packed + 10 MB, against
  // 53.6 MB + 4 x packed for a rank that would map and pack the whole layer.
  const double slack = 10e6;
  const double bound = share * layer_bytes + packed + slack;
  std::printf(
      "rank %d of %d: %d of %d experts, resident +%.1f MB (its share of the expert bytes "
      "%.1f MB, packed %.1f MB; the whole layer %.1f MB)\n",
      me, n, placement.count(me), spec.num_experts, static_cast<double>(grown) / 1e6,
      share * layer_bytes / 1e6, packed / 1e6, layer_bytes / 1e6);
  EXPECT_LE(static_cast<double>(grown), bound);
}

}  // namespace
