// The kernel contract's seams (src/backends/kernel.hpp), for every backend that runs here:
// a kernel created on an expert range packs only those experts, and a slot may read any row
// (an expert-parallel dispatch buffer: one row per arriving slot, in any order). The result
// of every slot must be the bits the whole-layer kernel gives that (token, expert) pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "base/thread_pool.hpp"
#include "base/workspace.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"

namespace {

using mxmoe::ActivationFormat;

mxmoe::LayerSpec small_spec() {
  mxmoe::LayerSpec s = mxmoe::preset("gpt-oss-20b");
  s.name = "kernel contract";
  s.num_experts = 8;
  s.top_k = 3;
  s.hidden = 96;
  s.intermediate = 64;
  return s;
}

std::vector<float> run(const mxmoe::ExpertKernel& kernel, const float* x, std::int64_t rows,
                       const mxmoe::ExpertBatch& batch, int hidden, mxmoe::ThreadPool& pool) {
  mxmoe::Workspace ws;
  const std::size_t bytes = kernel.workspace_bytes(rows, batch.slots, pool.size());
  std::vector<float> out(static_cast<std::size_t>(batch.slots * hidden),
                         std::numeric_limits<float>::quiet_NaN());
  mxmoe::ExpertForward f;
  f.x = x;
  f.rows = rows;
  f.batch = batch;
  f.slot_out = out.data();
  f.pool = &pool;
  f.workspace = ws.reserve(std::max<std::size_t>(bytes, 64));
  f.workspace_size = bytes;
  kernel.run(f);
  return out;
}

TEST(KernelContract, ExpertRangeAndDispatchRowsGiveTheWholeLayersBits) {
  const mxmoe::LayerSpec spec = small_spec();
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 21);
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  constexpr std::int64_t kTokens = 37;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * spec.hidden));
  for (float& v : x) v = normal(rng);
  std::vector<std::int32_t> ids;
  for (std::int64_t t = 0; t < kTokens; ++t) {
    std::vector<std::int32_t> e(static_cast<std::size_t>(spec.num_experts));
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    ids.insert(ids.end(), e.begin(), e.begin() + spec.top_k);
  }
  mxmoe::ThreadPool pool(2);
  int checked = 0;
  for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
    for (ActivationFormat f : mxmoe::all_activation_formats()) {
      mxmoe::Deployment d{spec, hw, {}};
      d.request.activation = f;
      if (!b->check(d).empty()) continue;
      SCOPED_TRACE(std::string(b->name()) + " " + std::string(mxmoe::to_string(f)));
      ++checked;
      // The whole layer, slot s reading token s / k.
      const auto whole_kernel = b->create(d, storage.weights());
      mxmoe::GroupedSlots whole;
      mxmoe::group_slots(ids, spec.top_k, spec.num_experts, whole);
      const std::vector<float> want =
          run(*whole_kernel, x.data(), kTokens, whole.batch, spec.hidden, pool);

      // Experts [3, 7) only, fed a dispatch buffer: the rows of their slots, shuffled, one
      // row per slot (a token routed to two local experts arrives twice).
      const mxmoe::ExpertRange range{3, 7};
      mxmoe::Deployment dr = d;
      dr.layer.num_experts = range.size();
      const auto part_kernel = b->create(dr, mxmoe::slice_experts(storage.weights(), range));
      std::vector<std::int64_t> arriving;  // original slot of each dispatched row
      for (std::int64_t s = 0; s < kTokens * spec.top_k; ++s)
        if (range.contains(ids[static_cast<std::size_t>(s)])) arriving.push_back(s);
      std::shuffle(arriving.begin(), arriving.end(), rng);
      const auto n = static_cast<std::int64_t>(arriving.size());
      std::vector<float> rows(static_cast<std::size_t>(n * spec.hidden));
      std::vector<std::int32_t> local_ids(static_cast<std::size_t>(n));
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t s = arriving[static_cast<std::size_t>(r)];
        std::copy_n(x.begin() + s / spec.top_k * spec.hidden, spec.hidden,
                    rows.begin() + r * spec.hidden);
        local_ids[static_cast<std::size_t>(r)] = ids[static_cast<std::size_t>(s)] - range.begin;
      }
      mxmoe::GroupedSlots part;
      mxmoe::group_slots(local_ids, /*top_k=*/1, range.size(), part);  // slot r reads row r
      const std::vector<float> got =
          run(*part_kernel, rows.data(), n, part.batch, spec.hidden, pool);
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t s = arriving[static_cast<std::size_t>(r)];
        ASSERT_EQ(std::memcmp(got.data() + r * spec.hidden, want.data() + s * spec.hidden,
                              static_cast<std::size_t>(spec.hidden) * sizeof(float)),
                  0)
            << "dispatched row " << r << " (slot " << s << ", expert "
            << ids[static_cast<std::size_t>(s)] << ")";
      }
      if (whole_kernel->packed_bytes() > 0) {
        const double ratio = static_cast<double>(part_kernel->packed_bytes()) /
                             static_cast<double>(whole_kernel->packed_bytes());
        EXPECT_NEAR(ratio, 0.5, 0.02) << "4 of 8 experts should pack half the bytes";
      }
    }
  }
  EXPECT_GE(checked, 2);  // at least the reference backend's formats run anywhere
}

}  // namespace
