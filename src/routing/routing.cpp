// The routing methods of docs/MODELS.md. Per token and in a fixed order, so a token's
// routing never depends on the batch. Scores are float32 like the models' reference code;
// normalising sums are accumulated in double (deterministic, and no worse than float).
#include "routing/routing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mxmoe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The scratch of one token, carved from the caller's span.
struct TokenScratch {
  float* score;       // [E] the method's score (its combine weight before normalisation)
  float* select;      // [E] what top-k ranks: score (+ selection bias); -inf = not eligible
  float* taken;       // [E] 1 once chosen
  float* group;       // [n_group] group scores
  float* group_kept;  // [n_group] 1 for a kept group
};

[[noreturn]] void bad_logit(std::int64_t token, int expert, float v) {
  throw std::invalid_argument("router logit of token " + std::to_string(token) + ", expert " +
                              std::to_string(expert) + " is " +
                              (std::isnan(v) ? std::string("NaN") : std::string("+inf")) +
                              "; logits must be finite or -inf");
}

// Index of the largest value among those not yet taken; strict '>' keeps the lowest index
// on ties, and starting from the first untaken index guarantees a distinct pick even when
// every remaining value is -inf.
int argmax_untaken(const float* values, const float* taken, int n) {
  int best = -1;
  for (int e = 0; e < n; ++e) {
    if (taken[e] != 0.0f) continue;
    if (best < 0 || values[e] > values[best]) best = e;
  }
  return best;
}

// Top-k of select[] into ids (descending, ties to the lower index). Marks taken[].
void top_k(const float* select, float* taken, int num, int k, std::int32_t* ids) {
  for (int e = 0; e < num; ++e) taken[e] = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int best = argmax_untaken(select, taken, num);
    taken[best] = 1.0f;
    ids[j] = best;
  }
}

void route_topk_softmax(const LayerSpec& spec, const float* logits, TokenScratch s,
                        std::int32_t* ids, float* weights) {
  const int k = spec.top_k;
  top_k(logits, s.taken, spec.num_experts, k, ids);
  const float top = logits[ids[0]];
  if (top == kNegInf) {  // every chosen logit is -inf: no preference among them
    for (int j = 0; j < k; ++j) weights[j] = 1.0f / static_cast<float>(k);
    return;
  }
  double sum = 0;
  for (int j = 0; j < k; ++j) {
    weights[j] = std::exp(logits[ids[j]] - top);
    sum += static_cast<double>(weights[j]);
  }
  for (int j = 0; j < k; ++j)
    weights[j] = static_cast<float>(static_cast<double>(weights[j]) / sum);
}

// p = softmax(logits) over all `num` experts (1/num each when every logit is -inf).
void softmax_scores(const float* logits, int num, float* score) {
  float top = kNegInf;
  for (int e = 0; e < num; ++e) top = std::max(top, logits[e]);
  if (top == kNegInf) {
    for (int e = 0; e < num; ++e) score[e] = 1.0f / static_cast<float>(num);
    return;
  }
  double sum = 0;
  for (int e = 0; e < num; ++e) {
    score[e] = std::exp(logits[e] - top);
    sum += static_cast<double>(score[e]);
  }
  for (int e = 0; e < num; ++e) score[e] = static_cast<float>(static_cast<double>(score[e]) / sum);
}

float softplus(float x) {  // log(1 + e^x) without overflow; softplus(-inf) = 0
  return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
}

// The score of every expert by one of DeepSeek's score functions.
void scores(ScoreFunction f, const float* logits, int num, float* score) {
  switch (f) {
    case ScoreFunction::softmax:
      softmax_scores(logits, num, score);
      return;
    case ScoreFunction::sigmoid:
      for (int e = 0; e < num; ++e) score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      return;
    case ScoreFunction::sqrtsoftplus:
      for (int e = 0; e < num; ++e) score[e] = std::sqrt(softplus(logits[e]));
      return;
  }
}

// weights[j] = score[ids[j]] (divided by their sum + 1e-20 when renormalize, DeepSeek's guard
// against an all-zero sum) x routed_scaling_factor; the sum is accumulated in double.
void gather_weights(const RoutingParams& p, const float* score, const std::int32_t* ids, int k,
                    float* weights) {
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += static_cast<double>(score[ids[j]]);
  for (int j = 0; j < k; ++j) {
    double w = score[ids[j]];
    if (p.renormalize) w /= sum + 1e-20;
    weights[j] = static_cast<float>(w * static_cast<double>(p.routed_scaling_factor));
  }
}

// Mixtral / Qwen3 (and DeepSeek-V4 with scoring_func softmax, which adds a selection bias
// and a scaling factor): softmax over all experts, top-k of p (+ bias), weights from p.
void route_softmax_topk(const LayerSpec& spec, const float* logits, const float* bias,
                        TokenScratch s, std::int32_t* ids, float* weights) {
  const int num = spec.num_experts, k = spec.top_k;
  const RoutingParams& p = spec.routing_params;
  softmax_scores(logits, num, s.score);
  const float* select = s.score;
  if (p.selection_bias) {
    for (int e = 0; e < num; ++e) s.select[e] = s.score[e] + bias[e];
    select = s.select;
  }
  top_k(select, s.taken, num, k, ids);
  if (!p.selection_bias && p.routed_scaling_factor == 1.0f) {
    // Mixtral / Qwen3: p / sum(chosen p), no guard (the sum is at least the largest p).
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += static_cast<double>(s.score[ids[j]]);
    for (int j = 0; j < k; ++j) {
      const float v = s.score[ids[j]];
      weights[j] = p.renormalize ? static_cast<float>(static_cast<double>(v) / chosen) : v;
    }
    return;
  }
  gather_weights(p, s.score, ids, k, weights);
}

// DeepSeek-V3 (sigmoid scores, n_group groups) and V4 (sqrt(softplus) scores, no groups):
// select by score + selection bias among the kept groups, weight by the unbiased score.
void route_deepseek(const LayerSpec& spec, const float* logits, const float* bias,
                    std::int64_t token, TokenScratch s, std::int32_t* ids, float* weights) {
  const int num = spec.num_experts, k = spec.top_k;
  const RoutingParams& p = spec.routing_params;
  const bool grouped = spec.routing == RoutingMethod::sigmoid_group_topk && p.n_group > 1;
  for (int e = 0; e < num; ++e) {
    s.score[e] = spec.routing == RoutingMethod::sigmoid_group_topk
                     ? 1.0f / (1.0f + std::exp(-logits[e]))
                     : std::sqrt(softplus(logits[e]));
    s.select[e] = p.selection_bias ? s.score[e] + bias[e] : s.score[e];
    if (std::isnan(s.select[e]))
      throw std::invalid_argument("selection score of token " + std::to_string(token) +
                                  ", expert " + std::to_string(e) +
                                  " is NaN (check the selection bias)");
  }
  for (int e = 0; e < num; ++e) s.taken[e] = 0.0f;
  if (grouped) {
    const int per_group = num / p.n_group;
    // Group score: the sum of the group's two best biased scores (one if the group has one).
    for (int g = 0; g < p.n_group; ++g) {
      const float* sel = s.select + g * per_group;
      std::int32_t best[2];
      const int count = std::min(2, per_group);
      top_k(sel, s.taken + g * per_group, per_group, count, best);
      float sum = 0;
      for (int j = 0; j < count; ++j) sum += sel[best[j]];
      s.group[g] = sum;
    }
    // Keep topk_group groups (ties to the lower group). Experts of the other groups are
    // marked taken, so the top-k below never picks them, even among -inf scores.
    for (int g = 0; g < p.n_group; ++g) s.group_kept[g] = 0.0f;
    for (int j = 0; j < p.topk_group; ++j)
      s.group_kept[argmax_untaken(s.group, s.group_kept, p.n_group)] = 1.0f;
    for (int e = 0; e < num; ++e) s.taken[e] = s.group_kept[e / per_group] != 0.0f ? 0.0f : 1.0f;
  }
  // validate(LayerSpec) guarantees k <= eligible experts, so every pick below is distinct
  // and eligible.
  for (int j = 0; j < k; ++j) {
    const int best = argmax_untaken(s.select, s.taken, num);
    s.taken[best] = 1.0f;
    ids[j] = best;
  }
  gather_weights(p, s.score, ids, k, weights);
}

void check_logits(const float* row, int num, std::int64_t token) {
  for (int e = 0; e < num; ++e)
    if (std::isnan(row[e]) || row[e] == std::numeric_limits<float>::infinity())
      bad_logit(token, e, row[e]);
}

}  // namespace

std::size_t routing_scratch_floats(const LayerSpec& spec) noexcept {
  const auto experts = static_cast<std::size_t>(std::max(spec.num_experts, 0));
  const auto groups = static_cast<std::size_t>(std::max(spec.routing_params.n_group, 1));
  return 3 * experts + 2 * groups;
}

void route_logits(const LayerSpec& spec, const float* logits, const float* selection_bias,
                  std::int64_t tokens, std::int32_t* ids, float* weights,
                  std::span<float> scratch) {
  const int num = spec.num_experts, k = spec.top_k;
  if (scratch.size() < routing_scratch_floats(spec))
    throw std::invalid_argument("route_logits: scratch too small");
  if (spec.routing == RoutingMethod::hash)
    throw std::invalid_argument("layer '" + spec.name +
                                "' is hash-routed (experts by token id): route with route_hash and "
                                "the tokens' ids");
  if (spec.routing_params.selection_bias && selection_bias == nullptr)
    throw std::invalid_argument("route_logits: the spec uses a selection bias but none was given");
  const auto n = static_cast<std::size_t>(num);
  const auto groups = static_cast<std::size_t>(std::max(spec.routing_params.n_group, 1));
  TokenScratch s{scratch.data(), scratch.data() + n, scratch.data() + 2 * n, scratch.data() + 3 * n,
                 scratch.data() + 3 * n + groups};
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * num;
    check_logits(row, num, t);
    std::int32_t* tid = ids + t * k;
    float* tw = weights + t * k;
    switch (spec.routing) {
      case RoutingMethod::topk_softmax:
        route_topk_softmax(spec, row, s, tid, tw);
        break;
      case RoutingMethod::softmax_topk:
        route_softmax_topk(spec, row, selection_bias, s, tid, tw);
        break;
      case RoutingMethod::sigmoid_group_topk:
      case RoutingMethod::sqrtsoftplus_topk:
        route_deepseek(spec, row, selection_bias, t, s, tid, tw);
        break;
      case RoutingMethod::hash:  // refused above
        break;
    }
  }
}

void validate_token_ids(const LayerSpec& spec, const std::int32_t* token_ids, std::int64_t tokens) {
  if (token_ids == nullptr)
    throw std::invalid_argument("layer '" + spec.name +
                                "' is hash-routed (DeepSeek-V4 tid2eid): it needs the tokens' ids");
  for (std::int64_t t = 0; t < tokens; ++t)
    if (token_ids[t] < 0 || token_ids[t] >= spec.vocab)
      throw std::invalid_argument("token id " + std::to_string(token_ids[t]) + " of token " +
                                  std::to_string(t) + " is out of range [0, " +
                                  std::to_string(spec.vocab) + ")");
}

void route_hash(const LayerSpec& spec, const float* logits, const TokenExpertTable& table,
                const std::int32_t* token_ids, std::int64_t tokens, std::int32_t* ids,
                float* weights, std::span<float> scratch) {
  const int num = spec.num_experts, k = spec.top_k;
  if (spec.routing != RoutingMethod::hash)
    throw std::invalid_argument("route_hash: layer '" + spec.name + "' routes by " +
                                std::string(to_string(spec.routing)) + ", not hash");
  if (scratch.size() < routing_scratch_floats(spec))
    throw std::invalid_argument("route_hash: scratch too small");
  if (table.empty() || table.vocab != spec.vocab || table.top_k != k)
    throw std::invalid_argument("route_hash: the tid2eid table does not match the spec");
  validate_token_ids(spec, token_ids, tokens);
  float* score = scratch.data();
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * num;
    check_logits(row, num, t);
    scores(spec.routing_params.score_function, row, num, score);
    std::int32_t* tid = ids + t * k;
    for (int j = 0; j < k; ++j) tid[j] = static_cast<std::int32_t>(table.at(token_ids[t], j));
    gather_weights(spec.routing_params, score, tid, k, weights + t * k);
  }
}

void validate_routing(const LayerSpec& spec, const std::int32_t* ids, const float* weights,
                      std::int64_t tokens) {
  const int k = spec.top_k;
  // The message is built only for a slot that fails: this runs on every routed call (an
  // engine's decode step), which must not allocate.
  const auto where = [](std::int64_t t, int j) {
    return "token " + std::to_string(t) + ", slot " + std::to_string(j);
  };
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const std::int32_t id = ids[t * k + j];
      const float w = weights[t * k + j];
      if (id < 0 || id >= spec.num_experts)
        throw std::invalid_argument("expert id " + std::to_string(id) + " of " + where(t, j) +
                                    " is out of range [0, " + std::to_string(spec.num_experts) +
                                    ")");
      for (int i = 0; i < j; ++i)
        if (ids[t * k + i] == id)
          throw std::invalid_argument("expert id " + std::to_string(id) + " of " + where(t, j) +
                                      " repeats slot " + std::to_string(i) +
                                      "; a token's experts must be distinct");
      if (!std::isfinite(w) || w < 0)
        throw std::invalid_argument("routing weight " + std::to_string(w) + " of " + where(t, j) +
                                    (std::isfinite(w) ? " is negative" : " is not finite") +
                                    "; routing weights must be finite and >= 0");
    }
  }
}

}  // namespace mxmoe
