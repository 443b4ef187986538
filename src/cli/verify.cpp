// `mxmoe verify`: every selectable backend x activation format against a float64
// evaluation of the same layer (src/runtime/evaluate_f64.hpp), with pass/fail against the
// budgets of docs/ACCURACY.md; --batch-invariant also compares each token alone with the
// same token inside the batch, bit for bit. Exit 1 on any failure.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/routing.hpp"
#include "verify/accuracy.hpp"
#include "verify/evaluate_f64.hpp"
#include "verify/invariance.hpp"

namespace mxmoe::cli {
namespace {

struct VerifyOptions {
  LayerOptions layer;
  HardwareOptions hardware;
  std::string backend = "all";
  std::string activation = "all";
  int tokens = 8;
  int threads = 0;
  bool batch_invariant = false;
  std::uint64_t seed = 1;
};

double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The routing every backend is given: the runtime's router on these inputs, or random
// distinct experts when the layer has no router weights.
void make_routing(const LayerSpec& s, const LayerWeights& w, const std::vector<float>& x,
                  std::int64_t tokens, std::uint64_t seed, std::vector<std::int32_t>& ids,
                  std::vector<float>& weights) {
  ids = std::vector<std::int32_t>(static_cast<std::size_t>(tokens * s.top_k));
  weights = std::vector<float>(ids.size());
  if (w.router_weight.empty()) {
    std::mt19937_64 rng(seed);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> order(static_cast<std::size_t>(s.num_experts));
      for (int e = 0; e < s.num_experts; ++e) order[static_cast<std::size_t>(e)] = e;
      std::shuffle(order.begin(), order.end(), rng);
      for (int j = 0; j < s.top_k; ++j) {
        ids[static_cast<std::size_t>(t * s.top_k + j)] = order[static_cast<std::size_t>(j)];
        weights[static_cast<std::size_t>(t * s.top_k + j)] = 1.0f / static_cast<float>(s.top_k);
      }
    }
    return;
  }
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data());
}

int verify(const VerifyOptions& o) {
  LayerSpec spec;
  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  LayerWeights w;
  if (o.layer.from_model()) {
    checkpoint.emplace(Checkpoint::open(o.layer.model));
    spec = checkpoint->layer_spec(o.layer.layer);
    w = checkpoint->layer_weights(o.layer.layer);
  } else {
    spec = o.layer.spec();
    fmt::print(stderr, "mxmoe verify: generating random MXFP4 weights for {}...\n", spec.name);
    storage.emplace(LayerStorage::random(spec, o.seed));
    w = storage->weights();
  }
  const Hardware hw = o.hardware.resolve();
  const std::int64_t tokens = o.tokens;

  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  std::mt19937_64 rng(o.seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  make_routing(spec, w, x, tokens, o.seed + 2, ids, weights);

  std::vector<const Backend*> backends;
  if (o.backend == "all") {
    for (const Backend* b : registered_backends()) backends.push_back(b);
  } else {
    const Backend* b = find_backend(o.backend);
    if (b == nullptr) {
      std::string names;
      for (const Backend* r : registered_backends())
        names += (names.empty() ? "" : ", ") + std::string(r->name());
      throw std::invalid_argument("unknown backend '" + o.backend + "'; valid: all, " + names);
    }
    backends.push_back(b);
  }
  const std::vector<ActivationFormat> formats =
      o.activation == "all" ? all_activation_formats()
                            : std::vector<ActivationFormat>{parse_activation_format(o.activation)};

  Runtime runtime(o.threads);
  ThreadPool& pool = runtime.pool();
  fmt::print(stderr, "mxmoe verify: float64 evaluation of the unquantized layer...\n");
  const std::vector<double> exact =
      evaluate_f64(spec, w, x.data(), tokens, ids.data(), weights.data(), std::nullopt, &pool);
  std::map<ActivationFormat, std::vector<double>> same_format;

  fmt::print("layer: {} (E={}, top-{}, H={}, I={}), {} tokens\n", spec.name, spec.num_experts,
             spec.top_k, spec.hidden, spec.intermediate, tokens);
  fmt::print("{:<12} {:<6} {:>14} {:>10} {:>14} {:>10} {:<10}{}\n", "backend", "format",
             "vs f64 same", "budget", "format error", "budget", "result",
             o.batch_invariant ? "  batch-invariant" : "");
  int failures = 0, verified = 0;
  for (const Backend* b : backends) {
    for (ActivationFormat f : formats) {
      Selection sel;
      sel.deployment = {spec, hw, Request{}};
      sel.deployment.request.activation = f;
      sel.deployment.request.threads = o.threads;
      sel.deployment.request.tokens_hint = o.tokens;
      sel.deployment.request.batch_invariant = o.batch_invariant;
      sel.chosen = std::string(b->name());
      sel.why = "mxmoe verify";
      if (const auto reasons = b->check(sel.deployment); !reasons.empty()) {
        fmt::print("{:<12} {:<6} skipped: {}: {}\n", b->name(), to_string(f),
                   to_string(reasons.front().code), reasons.front().detail);
        continue;
      }
      if (!same_format.contains(f)) {
        fmt::print(stderr, "mxmoe verify: float64 evaluation with {} rounding...\n", to_string(f));
        same_format[f] =
            evaluate_f64(spec, w, x.data(), tokens, ids.data(), weights.data(), f, &pool);
      }
      fmt::print(stderr, "mxmoe verify: {} {}...\n", b->name(), to_string(f));
      MoeLayer layer(w, sel, runtime);
      std::vector<float> y(x.size());
      layer.forward_routed(x.data(), ids.data(), weights.data(), tokens, y.data());
      const AccuracyBudget budget = accuracy_budget(f);
      const double vs_same = relative_l2(y, same_format[f]);
      const double vs_exact = relative_l2(y, exact);
      bool ok = vs_same <= budget.against_same_format && vs_exact <= budget.format_error;
      std::string invariance;
      if (o.batch_invariant) {
        // The conformance sweep of tests/invariance (src/runtime/invariance.hpp) on this
        // machine and model: 257 random tokens, batches of 1..257, 1 and N threads, 2 runs.
        InvarianceOptions inv;
        inv.thread_counts = {1, pool.size()};
        const InvarianceRouting routing =
            w.router_weight.empty() ? InvarianceRouting::routed : InvarianceRouting::router;
        const InvarianceReport report =
            check_batch_invariance([&](Runtime& rt) { return MoeLayer(w, sel, rt); },
                                   random_invariance_inputs(spec, routing, 257, o.seed + 3), inv);
        if (!report.identical())
          fmt::print(stderr, "mxmoe verify: {} {}: {}\n", b->name(), to_string(f),
                     report.first_mismatch->describe());
        invariance = report.identical() ? "  identical bits" : "  DIFFERENT bits";
        ok = ok && report.identical();
      }
      fmt::print("{:<12} {:<6} {:>14.3e} {:>10.1e} {:>14.3e} {:>10.1e} {:<10}{}\n", b->name(),
                 to_string(f), vs_same, budget.against_same_format, vs_exact, budget.format_error,
                 ok ? "pass" : "FAIL", invariance);
      failures += ok ? 0 : 1;
      ++verified;
    }
  }
  if (verified == 0) {
    fmt::print("nothing verified: no backend x format passed its check on this machine\n");
    return kExitError;
  }
  fmt::print("{} of {} passed\n", verified - failures, verified);
  return failures == 0 ? kExitOk : kExitError;
}

}  // namespace

void add_verify(CLI::App& app, Action& action) {
  auto opts = std::make_shared<VerifyOptions>();
  auto* sub = app.add_subcommand(
      "verify", "Check each selectable backend against a float64 evaluation of the layer");
  opts->layer.add(*sub);
  opts->hardware.add(*sub);
  sub->add_option("--backend", opts->backend, "Backend name, or all (default)");
  sub->add_option("--activation", opts->activation, "f32, bf16, int8, mxfp8, or all (default)");
  sub->add_option("--tokens", opts->tokens, "Random tokens (default 8)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--threads", opts->threads, "Threads (0 = all logical CPUs)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_flag("--batch-invariant", opts->batch_invariant,
                "Also check each token alone against the same token in batches of 1..257, bit "
                "for bit");
  sub->callback([&action, opts] { action = [opts] { return verify(*opts); }; });
}

}  // namespace mxmoe::cli
