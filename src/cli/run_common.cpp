// `mxmoe run`'s shared pieces (run_common.hpp).
#include "cli/run_common.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include "io/npy.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/runtime.hpp"
#include "perf/memory.hpp"
#include "perf/workload.hpp"
#include "routing/routing.hpp"

namespace mxmoe::cli::run_detail {

// Every file run reads: --output may be none of them.
CommandInputs inputs_of(const RunOptions& o) {
  CommandInputs inputs;
  inputs.checkpoint("--model", o.layer.model)
      .file("--input", o.input)
      .file("--token-ids", o.token_ids)
      .file("--hardware", o.hardware.file)
      .file("--placement", o.request.placement);
  return inputs;
}

std::string candidate_line(const Selection& s, const Verdict& v) {
  // The name column fits the longest candidate's name (at least 13).
  std::size_t width = 13;
  for (const Verdict& c : s.candidates) width = std::max(width, c.name.size());
  const std::string mark = v.name == s.chosen ? "*" : " ";
  if (v.supported)
    return fmt::format("{} {:<{}} supported  ~{:.0f} us/call (estimate)", mark, v.name, width,
                       v.estimated_us);
  const Rejection& r = v.reasons.front();
  return fmt::format("{} {:<{}} rejected   {}: {}{}", mark, v.name, width, to_string(r.code),
                     r.detail,
                     v.reasons.size() > 1 ? fmt::format(" (+{} more)", v.reasons.size() - 1) : "");
}

// Bytes of the expert weights one call reads on rank r.ep_rank: every distinct expert of
// that rank the routing touches, plus the shared expert (each rank runs it on its tokens).
double touched_weight_bytes(const LayerSpec& s, const LayerWeights& w, const Request& r,
                            const std::vector<float>& x, std::int64_t tokens,
                            const std::int32_t* token_ids) {
  if (w.router_weight.empty()) return 0;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
  std::vector<float> weights(ids.size());
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data(), token_ids);
  const Placement placement = placement_of(r, s.num_experts);
  std::vector<bool> used(static_cast<std::size_t>(s.num_experts), false);
  for (std::int32_t id : ids) used[static_cast<std::size_t>(id)] = true;
  const double per_expert = static_cast<double>(w.w1.bytes() + w.w2.bytes()) / s.num_experts;
  double bytes = 0;
  for (int e : placement.experts_of(r.ep_rank))
    if (used[static_cast<std::size_t>(e)]) bytes += per_expert;
  return bytes + static_cast<double>(w.shared_w1.bytes() + w.shared_w2.bytes() +
                                     w.shared_dense_w1.bytes() + w.shared_dense_w2.bytes());
}

// The input: --input's [M, H] array, else M = --tokens random rows (seeded).
std::vector<float> input_rows(const RunOptions& o, int hidden, std::int64_t& tokens) {
  if (!o.input.empty()) {
    NpyArray a = read_npy(o.input);
    if (a.shape.size() != 2 || a.shape[1] != hidden) {
      std::string shape;
      for (const auto d : a.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw LoadError(fmt::format(
          "--input {}: expected a float32 array of shape [M, {}] (the layer's hidden size), "
          "got [{}]",
          o.input, hidden, shape));
    }
    if (a.shape[0] < 1 || a.shape[0] > kMaxTokensPerCall)
      throw LoadError(fmt::format("--input {}: {} tokens; a call carries 1..{}", o.input,
                                  a.shape[0], kMaxTokensPerCall));
    tokens = a.shape[0];
    // A non-finite input has no defined output: refused naming the file and the tokens.
    const NonFinite bad = find_non_finite(a.data, tokens, hidden);
    if (bad.any()) throw LoadError(fmt::format("--input {}: {}", o.input, bad.describe(tokens)));
    return std::move(a.data);
  }
  tokens = o.request.tokens;
  return {};
}

// A hash layer's token ids (DeepSeek-V4's first layers; SPEC is one, WHAT names it):
// --token-ids, else random ones for random inputs; a real input without them is a usage
// error. Empty when no layer needs them and none were given.
std::vector<std::int32_t> token_ids_for(const RunOptions& o, const LayerSpec& spec,
                                        const std::string& what, std::int64_t tokens) {
  if (!o.token_ids.empty()) return read_token_ids(o.token_ids, tokens);
  if (spec.routing != RoutingMethod::hash) return {};
  if (!o.input.empty())
    throw UsageError(fmt::format(
        "{} is hash-routed (DeepSeek-V4's tid2eid: experts by token id): pass the tokens' "
        "ids with --token-ids ids.npy ([{}] int32 or int64)",
        what, tokens));
  std::mt19937_64 rng(o.seed + 2);
  std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (std::int32_t& v : ids) v = id(rng);
  progress("mxmoe run: {} is hash-routed: random token ids in [0, {})\n", what, spec.vocab);
  return ids;
}

void fill_random(std::vector<float>& x, std::uint64_t seed, std::int64_t count) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  x.resize(static_cast<std::size_t>(count));
  for (float& v : x) v = normal(rng);
}

// Input and output of `tokens` rows of the layer, its weights (generated, or the checkpoint's
// pages read), packed copy and workspace fit in memory now. Returns the estimate.
double require_io_memory(const RunOptions& o, const LayerSpec& spec, std::int64_t tokens,
                         const MoeLayer* layer) {
  const double row_bytes = static_cast<double>(spec.hidden) * sizeof(float);
  std::vector<std::pair<std::string, double>> parts = {
      {"input", o.input.empty() ? row_bytes * static_cast<double>(tokens) : 0},
      {"output", row_bytes * static_cast<double>(tokens)}};
  if (layer != nullptr) {
    parts.emplace_back("layer weights", static_cast<double>(perf::layer_weight_bytes(spec)));
    parts.emplace_back("packed weights", static_cast<double>(layer->packed_weight_bytes()));
    parts.emplace_back("workspace", static_cast<double>(layer->workspace_bytes(tokens)));
  }
  return require_memory(fmt::format("run: {} tokens of {}", tokens, spec.name), parts);
}

// A legal input can overflow (scales near the top of E8M0): never report NaN as a result.
void require_finite(const RunOptions& o, const std::vector<float>& y, std::int64_t tokens,
                    std::int64_t hidden) {
  const NonFinite bad = find_non_finite(y, tokens, hidden);
  if (bad.any())
    throw std::runtime_error(fmt::format("run: the output holds {}{}", bad.describe(tokens),
                                         o.output.empty() ? "" : "; --output was not written"));
}

Timing time_calls(int wanted_reps, double warm, bool say, const std::function<void()>& call) {
  using Clock = std::chrono::steady_clock;
  const int reps = wanted_reps > 0
                       ? wanted_reps
                       : std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), 1, 50);
  if (say && warm * reps > 2.0)
    progress("mxmoe run: timing {} calls (~{:.0f} s)...\n", reps, warm * reps);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    if (StopOnSignal::stop_requested()) throw Interrupted();  // a signal between two calls
    const auto t0 = Clock::now();
    call();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {reps, times[times.size() / 2]};
}

// The fields every form of `run --json` shares about the layer and the choice.
json::Json choice_json(const LayerSpec& spec, const Selection& sel, bool batch_invariant) {
  json::Json candidates = json::Json::array();
  for (const Verdict& v : sel.candidates) {
    json::Json reasons = json::Json::array();
    for (const Rejection& r : v.reasons) reasons.push_back(to_string(r.code));
    candidates.push_back({{"name", v.name}, {"supported", v.supported}, {"reasons", reasons}});
  }
  return {{"layer", spec.name},
          {"routing", to_string(spec.routing)},
          {"experts", spec.num_experts},
          {"top_k", spec.top_k},
          {"hidden", spec.hidden},
          {"intermediate", spec.intermediate},
          {"activation", to_string(*sel.deployment.request.activation)},
          {"batch_invariant", batch_invariant},
          {"chosen", sel.chosen},
          {"why", sel.why},
          {"candidates", candidates}};
}

// The fields both one-process forms of `run --json` share: tokens, threads, timing, bytes,
// output.
json::Json timing_json(std::int64_t tokens, int threads, int reps, double median, double bytes,
                       const std::string& output) {
  return {{"tokens", tokens},
          {"threads", threads},
          {"reps", reps},
          {"tokens_per_s", static_cast<double>(tokens) / median},
          {"weight_gb_per_s", bytes / median / 1e9},
          {"touched_weight_bytes", bytes},
          {"output", output.empty() ? json::Json(nullptr) : json::Json(output)}};
}

}  // namespace mxmoe::cli::run_detail
