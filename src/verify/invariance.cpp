// The batch-invariance checker (see invariance.hpp). Every batch is a random draw of distinct
// pool tokens in random order, so one forward call checks every position at once.
#include "verify/invariance.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>

namespace mxmoe {
namespace {

std::size_t to_size(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

// Copies rows `picked` of a [pool, width] matrix into dst [picked.size(), width].
template <class T>
void gather_rows(const std::vector<T>& src, std::int64_t width,
                 const std::vector<std::int64_t>& picked, std::vector<T>& dst) {
  const std::size_t w = to_size(width);
  dst.resize(picked.size() * w);
  for (std::size_t r = 0; r < picked.size(); ++r)
    std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(to_size(picked[r]) * w), w,
                dst.begin() + static_cast<std::ptrdiff_t>(r * w));
}

struct Batch {
  std::vector<float> x, logits, weights, y;
  std::vector<std::int32_t> ids, token_ids;
};

void run_batch(MoeLayer& layer, const InvarianceInputs& in, const std::vector<std::int64_t>& picked,
               Batch& b) {
  const LayerSpec& s = layer.spec();
  const auto tokens = static_cast<std::int64_t>(picked.size());
  gather_rows(in.x, s.hidden, picked, b.x);
  b.y.assign(b.x.size(), 0.0f);
  switch (in.routing) {
    case InvarianceRouting::router:
      if (in.token_ids.empty()) {
        layer.forward({.tokens = tokens, .x = b.x.data(), .y = b.y.data()});
      } else {
        gather_rows(in.token_ids, 1, picked, b.token_ids);
        layer.forward(
            {.tokens = tokens, .x = b.x.data(), .y = b.y.data(), .token_ids = b.token_ids.data()});
      }
      break;
    case InvarianceRouting::logits:
      gather_rows(in.logits, s.num_experts, picked, b.logits);
      layer.forward(
          {.tokens = tokens, .x = b.x.data(), .y = b.y.data(), .router_logits = b.logits.data()});
      break;
    case InvarianceRouting::routed:
      gather_rows(in.ids, s.top_k, picked, b.ids);
      gather_rows(in.route_weights, s.top_k, picked, b.weights);
      layer.forward({.tokens = tokens,
                     .x = b.x.data(),
                     .y = b.y.data(),
                     .expert_ids = b.ids.data(),
                     .expert_weights = b.weights.data()});
      break;
  }
}

void check_inputs(const LayerSpec& s, const InvarianceInputs& in, const InvarianceOptions& o) {
  const auto need = [&](std::size_t have, std::int64_t width, const char* what) {
    if (have != to_size(in.tokens * width))
      throw std::invalid_argument(fmt::format(
          "check_batch_invariance: {} has {} values, expected {}", what, have, in.tokens * width));
  };
  if (in.tokens < 1) throw std::invalid_argument("check_batch_invariance: empty token pool");
  if (o.batch_sizes.empty() || o.thread_counts.empty())
    throw std::invalid_argument("check_batch_invariance: no batch sizes or thread counts");
  need(in.x.size(), s.hidden, "x");
  if (in.routing == InvarianceRouting::logits) need(in.logits.size(), s.num_experts, "logits");
  if (in.routing == InvarianceRouting::routed) {
    need(in.ids.size(), s.top_k, "ids");
    need(in.route_weights.size(), s.top_k, "route_weights");
  }
  if (!in.token_ids.empty()) need(in.token_ids.size(), 1, "token_ids");
}

}  // namespace

std::string InvarianceMismatch::describe() const {
  return fmt::format(
      "token {} at position {} of a batch of {} ({} threads, run {}): output[{}] alone {} "
      "({:#010x}) vs batched {} ({:#010x})",
      token, position, batch_size, threads, run, index, alone, std::bit_cast<std::uint32_t>(alone),
      batched, std::bit_cast<std::uint32_t>(batched));
}

InvarianceReport check_batch_invariance(const std::function<MoeLayer(Runtime&)>& make_layer,
                                        const InvarianceInputs& inputs,
                                        const InvarianceOptions& options) {
  // One runtime per thread count (and one thread for the reference), outliving the layers.
  std::map<int, std::unique_ptr<Runtime>> runtimes;
  runtimes[1] = std::make_unique<Runtime>(1);
  for (int threads : options.thread_counts)
    if (threads >= 1 && !runtimes.count(threads))
      runtimes[threads] = std::make_unique<Runtime>(threads);
  MoeLayer first = make_layer(*runtimes.at(1));
  const LayerSpec& spec = first.spec();
  check_inputs(spec, inputs, options);
  const auto hidden = static_cast<std::size_t>(spec.hidden);

  // The reference: every pool token alone, one thread.
  std::vector<float> alone(to_size(inputs.tokens) * hidden);
  Batch b;
  for (std::int64_t t = 0; t < inputs.tokens; ++t) {
    run_batch(first, inputs, {t}, b);
    std::copy(b.y.begin(), b.y.end(),
              alone.begin() + static_cast<std::ptrdiff_t>(to_size(t) * hidden));
  }

  InvarianceReport report;
  std::mt19937_64 rng(options.seed);
  std::vector<std::int64_t> order(to_size(inputs.tokens));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::optional<MoeLayer> fresh;
  for (int run = 0; run < std::max(options.repeats, 1); ++run) {
    const bool use_fresh = options.repeats > 1 && run == options.repeats - 1;
    if (use_fresh) fresh.emplace(make_layer(*runtimes.at(1)));
    MoeLayer& layer = use_fresh ? *fresh : first;
    for (int threads : options.thread_counts) {
      if (threads < 1) throw std::invalid_argument("check_batch_invariance: thread count < 1");
      layer.set_runtime(*runtimes.at(threads));
      for (std::int64_t size : options.batch_sizes) {
        const std::int64_t batch = std::min(size, inputs.tokens);
        for (int draw = 0; draw < std::max(options.batches_per_size, 1); ++draw) {
          std::shuffle(order.begin(), order.end(), rng);
          const std::vector<std::int64_t> picked(
              order.begin(), order.begin() + static_cast<std::ptrdiff_t>(batch));
          run_batch(layer, inputs, picked, b);
          for (std::size_t row = 0; row < picked.size(); ++row) {
            const float* want = alone.data() + to_size(picked[row]) * hidden;
            const float* got = b.y.data() + row * hidden;
            ++report.rows_compared;
            if (std::memcmp(want, got, hidden * sizeof(float)) == 0) continue;
            std::size_t i = 0;
            while (std::memcmp(want + i, got + i, sizeof(float)) == 0) ++i;
            report.first_mismatch =
                InvarianceMismatch{picked[row], static_cast<std::int64_t>(row), batch,   threads,
                                   run,         static_cast<std::int64_t>(i),   want[i], got[i]};
            return report;
          }
        }
      }
    }
  }
  return report;
}

InvarianceInputs random_invariance_inputs(const LayerSpec& spec, InvarianceRouting routing,
                                          std::int64_t tokens, std::uint64_t seed) {
  InvarianceInputs in;
  in.routing = routing;
  in.tokens = tokens;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  in.x.resize(to_size(tokens * spec.hidden));
  for (float& v : in.x) v = normal(rng);
  if (routing == InvarianceRouting::router && spec.routing == RoutingMethod::hash) {
    std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
    in.token_ids.resize(to_size(tokens));
    for (std::int32_t& v : in.token_ids) v = id(rng);
  }
  if (routing == InvarianceRouting::logits) {
    in.logits.resize(to_size(tokens * spec.num_experts));
    for (float& v : in.logits) v = normal(rng);
  }
  if (routing == InvarianceRouting::routed) {
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    std::vector<std::int32_t> experts(to_size(spec.num_experts));
    std::iota(experts.begin(), experts.end(), 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::shuffle(experts.begin(), experts.end(), rng);
      for (int j = 0; j < spec.top_k; ++j) {
        in.ids.push_back(experts[static_cast<std::size_t>(j)]);
        in.route_weights.push_back(weight(rng));
      }
    }
  }
  return in;
}

}  // namespace mxmoe
