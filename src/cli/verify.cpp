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
#include <utility>
#include <vector>

#include "backends/described_backend.hpp"
#include "backends/registry.hpp"
#include "base/json.hpp"
#include "base/thread_pool.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/layer.hpp"
#include "routing/routing.hpp"
#include "runtime/runtime_pool.hpp"
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
  bool thorough = false;
  bool json = false;
  std::uint64_t seed = 1;
};

// The batch-invariance sweep. The default takes seconds per backend; --thorough is the
// conformance sweep of tests/invariance: 257 tokens, batches of 1..257, two draws, two runs.
InvarianceOptions invariance_options(bool thorough, int pool_threads, std::int64_t& pool_tokens) {
  InvarianceOptions inv;
  inv.thread_counts = {1, pool_threads};
  if (thorough) {
    pool_tokens = 257;
    return inv;
  }
  pool_tokens = 24;
  inv.batch_sizes = {1, 3, 8, 24};
  inv.batches_per_size = 1;
  inv.repeats = 1;
  return inv;
}

template <class... Args>
void progress(fmt::format_string<Args...> f, Args&&... args) {
  cli::print(stderr, f, std::forward<Args>(args)...);
  std::fflush(stderr);
}

double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The routing every backend is given: the runtime's router on these inputs (a hash layer's
// with random token ids), or random distinct experts when the layer has no router weights.
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
  std::vector<std::int32_t> token_ids;
  if (s.routing == RoutingMethod::hash) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int32_t> id(0, s.vocab - 1);
    for (std::int64_t t = 0; t < tokens; ++t) token_ids.push_back(id(rng));
  }
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data(),
                    token_ids.empty() ? nullptr : token_ids.data());
}

struct Tally {
  int verified = 0, failures = 0;
};

// The layer verified: a checkpoint's layer, or random weights for the preset (held by
// storage, which the weights' views point into).
struct LayerUnderTest {
  LayerSpec spec;
  std::optional<LayerStorage> storage;
  LayerWeights w;
};

void load_layer(const VerifyOptions& o, const Checkpoint* checkpoint, int layer_index,
                LayerUnderTest& l) {
  if (checkpoint != nullptr) {
    l.spec = checkpoint->layer_spec(layer_index);
    l.w = checkpoint->layer_weights(layer_index);
    return;
  }
  l.spec = o.layer.spec();
  progress("mxmoe verify: generating random MXFP4 weights for {}...\n", l.spec.name);
  l.storage.emplace(LayerStorage::random(l.spec, o.seed));
  l.w = l.storage->weights();
}

// What every backend is given: random inputs (from --seed) and their routing (make_routing).
struct VerifyInputs {
  std::vector<float> x;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

VerifyInputs make_inputs(const VerifyOptions& o, const LayerSpec& spec, const LayerWeights& w) {
  const std::int64_t tokens = o.tokens;
  VerifyInputs in;
  in.x.resize(static_cast<std::size_t>(tokens * spec.hidden));
  std::mt19937_64 rng(o.seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : in.x) v = normal(rng);
  make_routing(spec, w, in.x, tokens, o.seed + 2, in.ids, in.weights);
  return in;
}

// The backend column fits the longest name verified (at least "backend" and 13).
std::size_t backend_column_width(const std::vector<const Backend*>& backends) {
  std::size_t width = 13;
  for (const Backend* b : backends) width = std::max(width, b->name().size());
  return width;
}

void print_layer_header(const VerifyOptions& o, const LayerSpec& spec, bool from_checkpoint,
                        int layer_index, std::size_t width) {
  if (from_checkpoint) cli::print("== layer {} ==\n", layer_index);
  cli::print("layer: {} (E={}, top-{}, H={}, I={}{}{}), {} tokens\n", spec.name, spec.num_experts,
             spec.top_k, spec.hidden, spec.intermediate,
             spec.shared_experts > 0
                 ? fmt::format(", shared {}", to_string(spec.shared_weight_format))
                 : "",
             spec.routing == RoutingMethod::hash ? ", hash-routed by token id" : "", o.tokens);
  cli::print("{:<{}} {:<6} {:>14} {:>10} {:>14} {:>10} {:<10}{}\n", "backend", width, "format",
             "vs f64 same", "budget", "format error", "budget", "result",
             o.batch_invariant ? "  batch-invariant" : "");
  std::fflush(stdout);
}

// Why backend b is not verified: the oracle's reasons against it in sel, else (a replayed
// probe) this machine's, since a replayed probe never runs a kernel this CPU lacks.
std::vector<Rejection> reasons_against(const Backend& b, const Selection& sel,
                                       const std::optional<Hardware>& live) {
  std::vector<Rejection> reasons;
  for (const Verdict& v : sel.candidates)
    if (v.name == b.name()) reasons = v.reasons;
  if (reasons.empty() && live) {
    Deployment here = sel.deployment;
    here.hardware = *live;
    reasons = b.check(here);
    for (Rejection& r : reasons) r.detail = "on this machine (not the replayed probe): " + r.detail;
  }
  return reasons;
}

// One backend x format's result against the budgets of docs/ACCURACY.md.
struct Outcome {
  NonFinite bad;
  AccuracyBudget budget;
  double vs_same = 0, vs_exact = 0;
  bool ok = false;
  std::string invariance;  // the batch-invariance column ("" when not asked)
};

// Verifies every backend x format of one layer, printing (or collecting as JSON) each result.
class LayerVerifier {
 public:
  LayerVerifier(const VerifyOptions& o, const LayerSpec& spec, const LayerWeights& w,
                std::size_t width)
      : o_(o),
        spec_(spec),
        w_(w),
        width_(width),
        hw_(o.hardware.resolve()),
        live_(o.hardware.replayed() ? std::optional<Hardware>(HardwareOptions::live())
                                    : std::nullopt),
        in_(make_inputs(o, spec, w)),
        runtime_(o.threads) {
    progress("mxmoe verify: float64 evaluation of the unquantized layer...\n");
    exact_ = evaluate_f64(spec_, w_, in_.x.data(), tokens(), in_.ids.data(), in_.weights.data(),
                          std::nullopt, &pool_of(runtime_));
  }

  // One backend x format, the index-th of total: skipped (reasons said), or passed or failed.
  void verify(const Backend& b, ActivationFormat f, std::size_t index, std::size_t total) {
    Selection sel = select(b, f);
    const std::vector<Rejection> reasons = reasons_against(b, sel, live_);
    if (!reasons.empty()) {
      report_skipped(b, f, reasons.front());
      return;
    }
    const SameFormat& same = same_format_reference(b, f);
    progress("mxmoe verify: [{}/{}] {} {}...\n", index, total, b.name(), to_string(f));
    Outcome out = check_accuracy(b, f, sel, same);
    if (o_.batch_invariant) out.invariance = check_invariance(b, f, sel, index, total, out.ok);
    report(b, f, out);
    tally_.failures += out.ok ? 0 : 1;
    ++tally_.verified;
  }

  // The layer's document of --json: its results and totals.
  json::Json document(int layer_index) const {
    return {{"layer", spec_.name},
            {"index", layer_index},
            {"routing", to_string(spec_.routing)},
            {"tokens", tokens()},
            {"results", results_},
            {"verified", tally_.verified},
            {"passed", tally_.verified - tally_.failures}};
  }
  Tally tally() const { return tally_; }

 private:
  std::int64_t tokens() const { return o_.tokens; }

  // The one selection path, forced to this backend (so MXMOE_VERBOSE=dispatch logs it).
  Selection select(const Backend& b, ActivationFormat f) const {
    Request request;
    request.activation = f;
    request.threads = o_.threads;
    request.tokens_hint = o_.tokens;
    request.batch_invariant = o_.batch_invariant;
    request.forced_backend = std::string(b.name());
    Selection sel = judge(Deployment{spec_, hw_, request}, preferences_for(spec_.family));
    sel.why = "mxmoe verify";
    return sel;
  }

  // The float64 evaluation with f's rounding (and avx2_int16's int16 blocks:
  // rounds_to_int16_blocks), computed at its first use.
  // With its budget (same_format_budget: the format's plus one rounding flip).
  struct SameFormat {
    std::vector<double> y;
    double budget = 0;
  };
  const SameFormat& same_format_reference(const Backend& b, ActivationFormat f) {
    const std::pair<ActivationFormat, bool> rounding{f, rounds_to_int16_blocks(b)};
    if (!same_format_.contains(rounding)) {
      progress("mxmoe verify: float64 evaluation with {} rounding{}...\n", to_string(f),
               rounding.second ? " and int16 blocks" : "");
      SameFormat& same = same_format_[rounding];
      double largest_flip = 0;
      same.y = evaluate_f64(spec_, w_, in_.x.data(), tokens(), in_.ids.data(), in_.weights.data(),
                            f, &pool_of(runtime_), rounding.second, &largest_flip);
      double norm2 = 0;
      for (const double v : same.y) norm2 += v * v;
      same.budget = same_format_budget(f, largest_flip, std::sqrt(norm2));
    }
    return same_format_[rounding];
  }

  Outcome check_accuracy(const Backend& b, ActivationFormat f, const Selection& sel,
                         const SameFormat& same) {
    MoeLayer layer(w_, sel, runtime_);
    std::vector<float> y(in_.x.size());
    layer.forward({.tokens = tokens(),
                   .x = in_.x.data(),
                   .y = y.data(),
                   .expert_ids = in_.ids.data(),
                   .expert_weights = in_.weights.data()});
    Outcome out;
    out.bad = find_non_finite(y, tokens(), spec_.hidden);
    out.budget = accuracy_budget(f);
    out.budget.against_same_format = same.budget;
    out.vs_same = relative_l2(y, same.y);
    out.vs_exact = relative_l2(y, exact_);
    // NaN compares false: a non-finite output fails here, and is named below.
    out.ok = !out.bad.any() && out.vs_same <= out.budget.against_same_format &&
             out.vs_exact <= out.budget.format_error;
    if (out.bad.any())
      cli::print(stderr, "mxmoe verify: {} {}: the output holds {}\n", b.name(), to_string(f),
                 out.bad.describe(tokens()));
    return out;
  }

  // --batch-invariant: each token alone against the same token in batches, bit for bit; the
  // column's text. ok turns false on a difference.
  std::string check_invariance(const Backend& b, ActivationFormat f, const Selection& sel,
                               std::size_t index, std::size_t total, bool& ok) {
    if (b.is_reference() && !o_.thorough)
      return "  not swept (reference: invariant by construction; --thorough sweeps it)";
    std::int64_t pool_tokens = 0;
    const InvarianceOptions inv =
        invariance_options(o_.thorough, pool_of(runtime_).size(), pool_tokens);
    progress("mxmoe verify: [{}/{}] {} {}: batch invariance over {} tokens...\n", index, total,
             b.name(), to_string(f), pool_tokens);
    const InvarianceRouting routing =
        w_.router_weight.empty() ? InvarianceRouting::routed : InvarianceRouting::router;
    const InvarianceReport report = check_batch_invariance(
        [&](Runtime& rt) { return MoeLayer(w_, sel, rt); },
        random_invariance_inputs(spec_, routing, pool_tokens, o_.seed + 3), inv);
    if (!report.identical())
      cli::print(stderr, "mxmoe verify: {} {}: {}\n", b.name(), to_string(f),
                 report.first_mismatch->describe());
    ok = ok && report.identical();
    return report.identical() ? "  identical bits" : "  DIFFERENT bits";
  }

  void report_skipped(const Backend& b, ActivationFormat f, const Rejection& first) {
    if (o_.json) {
      results_.push_back({{"backend", b.name()},
                          {"format", to_string(f)},
                          {"result", "skipped"},
                          {"reason", std::string(to_string(first.code)) + ": " + first.detail}});
      return;
    }
    cli::print("{:<{}} {:<6} skipped: {}: {}\n", b.name(), width_, to_string(f),
               to_string(first.code), first.detail);
    std::fflush(stdout);
  }

  void report(const Backend& b, ActivationFormat f, const Outcome& out) {
    if (o_.json) {
      json::Json r = {{"backend", b.name()},
                      {"format", to_string(f)},
                      {"result", out.ok ? "pass" : "fail"},
                      {"vs_f64_same_format",
                       std::isfinite(out.vs_same) ? json::Json(out.vs_same) : json::Json(nullptr)},
                      {"budget_same_format", out.budget.against_same_format},
                      {"format_error", std::isfinite(out.vs_exact) ? json::Json(out.vs_exact)
                                                                   : json::Json(nullptr)},
                      {"budget_format_error", out.budget.format_error},
                      {"non_finite_values", out.bad.values}};
      if (o_.batch_invariant) r["batch_invariance"] = out.invariance.substr(2);
      results_.push_back(r);
      return;
    }
    cli::print("{:<{}} {:<6} {:>14.3e} {:>10.2e} {:>14.3e} {:>10.1e} {:<10}{}\n", b.name(), width_,
               to_string(f), out.vs_same, out.budget.against_same_format, out.vs_exact,
               out.budget.format_error, out.ok ? "pass" : "FAIL", out.invariance);
    std::fflush(stdout);  // each result as it completes
  }

  const VerifyOptions& o_;
  const LayerSpec& spec_;
  const LayerWeights& w_;
  const std::size_t width_;
  const Hardware hw_;
  const std::optional<Hardware> live_;
  const VerifyInputs in_;
  Runtime runtime_;
  std::vector<double> exact_;
  // By (format, int16 blocks): avx2_int16 rounds its inputs further (rounds_to_int16_blocks).
  std::map<std::pair<ActivationFormat, bool>, SameFormat> same_format_;
  json::Json results_ = json::Json::array();
  Tally tally_;
};

// One layer (INDEX of CHECKPOINT, or the preset when null): every backend x format.
Tally verify_layer(const VerifyOptions& o, const std::vector<const Backend*>& backends,
                   const std::vector<ActivationFormat>& formats, const Checkpoint* checkpoint,
                   int layer_index, json::Json& layer_results) {
  const std::size_t width = backend_column_width(backends);
  LayerUnderTest layer;
  load_layer(o, checkpoint, layer_index, layer);
  LayerVerifier verifier(o, layer.spec, layer.w, width);
  if (!o.json) print_layer_header(o, layer.spec, checkpoint != nullptr, layer_index, width);
  const std::size_t total = backends.size() * formats.size();
  std::size_t index = 0;
  for (const Backend* b : backends)
    for (ActivationFormat f : formats) verifier.verify(*b, f, ++index, total);
  layer_results = verifier.document(layer_index);
  return verifier.tally();
}

int verify(const VerifyOptions& o) {
  // Names first: a typo is a usage error before minutes of work.
  std::vector<const Backend*> backends;
  if (o.backend == "all") {
    for (const Backend* b : registered_backends()) backends.push_back(b);
  } else {
    backends.push_back(find_backend(require_backend_name(o.backend, "--backend")));
  }
  std::vector<ActivationFormat> formats = all_activation_formats();
  if (o.activation != "all") {
    try {
      formats = {parse_activation_format(o.activation)};
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--activation: ") + e.what());
    }
  }

  const std::vector<int> layers = o.layer.selected_layers();
  std::optional<Checkpoint> checkpoint;
  if (o.layer.from_model()) {
    checkpoint.emplace(Checkpoint::open(o.layer.model));
    for (const int index : layers) (void)checkpoint->layer_spec(index);  // all, before any work
  }
  int verified = 0, failures = 0;
  json::Json per_layer = json::Json::array();
  for (const int index : layers) {
    json::Json one;
    const Tally t =
        verify_layer(o, backends, formats, checkpoint ? &*checkpoint : nullptr, index, one);
    verified += t.verified;
    failures += t.failures;
    per_layer.push_back(std::move(one));
  }
  if (o.json) {
    // One layer: its document (as before); several: {"layers": [...], totals}.
    const json::Json out = per_layer.size() == 1 ? per_layer[0]
                                                 : json::Json{{"layers", per_layer},
                                                              {"verified", verified},
                                                              {"passed", verified - failures}};
    cli::print("{}\n", out.dump(2));
  } else if (verified > 0) {
    cli::print("{} of {} passed\n", verified - failures, verified);
  }
  if (verified == 0) {
    cli::print(stderr,
               "mxmoe verify: nothing verified: no backend x format passed its check on this "
               "machine\n");
    return kExitError;
  }
  return failures == 0 ? kExitOk : kExitError;
}

}  // namespace

void add_verify(CLI::App& app, Action& action) {
  const auto [sub, opts] = add_command<VerifyOptions>(
      app, action, "verify",
      "Check each selectable backend against a float64 evaluation of the layer", verify);
  opts->layer.add(*sub, /*several_layers=*/true);
  opts->hardware.add(*sub);
  sub->add_option("--backend", opts->backend, "Backend name, or all (default)");
  sub->add_option("--activation", opts->activation, "f32, bf16, int8, mxfp8, or all (default)");
  sub->add_option("--tokens", opts->tokens, "Random tokens, 1..4096 (default 8)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--threads", opts->threads,
                  fmt::format("Threads: 0 = all logical CPUs, at most {}", kMaxThreads))
      ->check(CLI::Range(0, kMaxThreads));
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_flag("--batch-invariant", opts->batch_invariant,
                "Also check each token alone against the same token in batches, bit for bit "
                "(24 tokens, batches of 1, 3, 8, 24; the reference with --thorough only)");
  sub->add_flag("--thorough", opts->thorough,
                "The full sweep: 257 tokens, batches of 1..257, two draws, two runs, every "
                "backend (minutes)");
  sub->add_flag("--json", opts->json, "Print the results as one JSON document");
}

}  // namespace mxmoe::cli
