#include "perf/workload.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace mxmoe::perf {

namespace {

// MXFP4 bytes of a [rows, cols] matrix: cols/2 packed bytes + cols/32 scales per row.
std::uint64_t mxfp4_matrix_bytes(std::uint64_t rows, std::uint64_t cols) {
  return rows * (cols / 2 + cols / 32);
}

std::uint64_t u64(int v) {
  return static_cast<std::uint64_t>(v);
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    items.push_back(first == std::string::npos ? std::string()
                                               : item.substr(first, last - first + 1));
  }
  if (!text.empty() && text.back() == ',') items.emplace_back();
  return items;
}

}  // namespace

std::uint64_t expert_weight_bytes(const LayerSpec& spec) {
  const std::uint64_t h = u64(spec.hidden), i = u64(spec.intermediate);
  return mxfp4_matrix_bytes(2 * i, h) + mxfp4_matrix_bytes(h, i);
}

std::uint64_t shared_weight_bytes(const LayerSpec& spec) {
  if (spec.shared_experts <= 0) return 0;
  const std::uint64_t h = u64(spec.hidden), is = u64(spec.shared_intermediate);
  switch (spec.shared_weight_format) {
    case ElementType::mxfp4:
      return mxfp4_matrix_bytes(2 * is, h) + mxfp4_matrix_bytes(h, is);
    case ElementType::f32:
      return 4 * 3 * h * is;
    case ElementType::bf16:
    case ElementType::fp8_e4m3:  // the dense kernel reads it as exact bf16
      return 2 * 3 * h * is;
  }
  return 0;
}

std::uint64_t touched_weight_bytes(const LayerSpec& spec, int distinct_experts) {
  return u64(distinct_experts) * expert_weight_bytes(spec) + shared_weight_bytes(spec);
}

std::uint64_t layer_weight_bytes(const LayerSpec& spec) {
  return touched_weight_bytes(spec, spec.num_experts);
}

std::vector<RankMemory> rank_memory(const LayerSpec& spec, const Placement& placement) {
  const std::uint64_t h = u64(spec.hidden), i = u64(spec.intermediate), e = u64(spec.num_experts);
  const std::uint64_t bias = spec.expert_bias ? 2 * (2 * i + h) : 0;  // BF16 b1, b2
  const std::uint64_t router = e * h * (2 + 4) + (spec.router_bias ? 2 * e : 0) +
                               (spec.routing_params.selection_bias ? 4 * e : 0) +
                               // a hash layer's tid2eid [vocab, k], I64 as DeepSeek releases it
                               (spec.routing == RoutingMethod::hash
                                    ? u64(spec.vocab) * u64(spec.top_k) * 8
                                    : 0);
  std::vector<RankMemory> out;
  for (int r = 0; r < placement.ranks(); ++r) {
    const int n = placement.count(r);
    out.push_back(
        {r, n, u64(n) * (expert_weight_bytes(spec) + bias), router + shared_weight_bytes(spec)});
  }
  return out;
}

double layer_flops(const LayerSpec& spec, std::int64_t tokens) {
  const double h = spec.hidden, i = spec.intermediate;
  const double is = spec.shared_experts > 0 ? spec.shared_intermediate : 0;
  return 2.0 * static_cast<double>(tokens) * (spec.top_k * 3.0 * h * i + 3.0 * h * is);
}

int count_distinct_experts(std::span<const std::int32_t> ids, int num_experts) {
  std::vector<bool> seen(u64(std::max(num_experts, 0)), false);
  int distinct = 0;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= num_experts) continue;
    if (!seen[static_cast<std::size_t>(id)]) {
      seen[static_cast<std::size_t>(id)] = true;
      ++distinct;
    }
  }
  return distinct;
}

CopyPlan plan_copies(std::uint64_t bytes_per_copy, std::uint64_t llc_bytes,
                     std::uint64_t budget_bytes, bool cache_resident) {
  CopyPlan plan;
  const std::uint64_t per_copy = std::max<std::uint64_t>(bytes_per_copy, 1);
  if (!cache_resident) {
    const std::uint64_t wanted = (4 * llc_bytes + per_copy - 1) / per_copy;
    const std::uint64_t affordable = budget_bytes / per_copy;
    plan.copies =
        static_cast<int>(std::clamp<std::uint64_t>(std::min(wanted, affordable), 1, 4096));
  }
  plan.total_bytes = static_cast<std::uint64_t>(plan.copies) * bytes_per_copy;
  plan.llc_multiple =
      llc_bytes > 0 ? static_cast<double>(plan.total_bytes) / static_cast<double>(llc_bytes) : 0.0;
  const std::string llc = llc_bytes > 0 ? fmt::format(" ({:.1f}x LLC)", plan.llc_multiple)
                                        : std::string(" (LLC size unknown)");
  const double gb = static_cast<double>(plan.total_bytes) / 1e9;
  if (cache_resident) {
    plan.mode = fmt::format("cache-resident: 1 copy, {:.2f} GB{}", gb, llc);
  } else {
    plan.mode = fmt::format("streaming: {} {}, {:.2f} GB{}", plan.copies,
                            plan.copies == 1 ? "copy" : "copies", gb, llc);
    if (plan.llc_multiple > 0 && plan.llc_multiple < 4)
      plan.mode += " - below 4x LLC (memory budget), so part of the weights may stay cached";
  }
  return plan;
}

BalancedRouting::BalancedRouting(int num_experts, int top_k, std::uint64_t seed)
    : num_experts_(num_experts), top_k_(top_k), rng_(seed) {
  if (num_experts <= 0 || top_k <= 0 || top_k > num_experts)
    throw std::invalid_argument("BalancedRouting: need 0 < top_k <= num_experts");
}

void BalancedRouting::fill(std::int64_t tokens, std::int32_t* ids, float* weights) {
  std::uniform_real_distribution<float> logit(-2.0f, 2.0f);
  const auto k = static_cast<std::size_t>(top_k_);
  for (std::int64_t t = 0; t < tokens; ++t) {
    // With at least one whole permutation pending, k distinct experts are always found.
    while (pending_.size() < 2 * static_cast<std::size_t>(num_experts_)) {
      const std::size_t old = pending_.size();
      pending_.resize(old + static_cast<std::size_t>(num_experts_));
      std::iota(pending_.begin() + static_cast<std::ptrdiff_t>(old), pending_.end(), 0);
      std::shuffle(pending_.begin() + static_cast<std::ptrdiff_t>(old), pending_.end(), rng_);
    }
    std::int32_t* row_ids = ids + static_cast<std::size_t>(t) * k;
    float* row_w = weights + static_cast<std::size_t>(t) * k;
    std::size_t taken = 0;
    for (auto it = pending_.begin(); taken < k;) {
      if (std::find(row_ids, row_ids + taken, *it) == row_ids + taken) {
        row_ids[taken++] = *it;
        it = pending_.erase(it);
      } else {
        ++it;  // already chosen by this token: keep it for a later token
      }
    }
    float sum = 0;
    for (std::size_t j = 0; j < k; ++j) {
      row_w[j] = std::exp(logit(rng_));
      sum += row_w[j];
    }
    for (std::size_t j = 0; j < k; ++j) row_w[j] /= sum;
  }
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what, int min_value,
                                int max_value) {
  std::vector<int> values;
  for (const std::string& item : split_commas(text)) {
    int value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() ||
        value < min_value || value > max_value)
      throw std::invalid_argument(what + ": '" + item + "' is not an integer in [" +
                                  std::to_string(min_value) + ", " + std::to_string(max_value) +
                                  "] (in '" + text + "')");
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
  }
  if (values.empty()) throw std::invalid_argument(what + ": empty list");
  return values;
}

std::vector<std::string> parse_name_list(const std::string& text, const std::string& what) {
  std::vector<std::string> names;
  for (const std::string& item : split_commas(text)) {
    if (item.empty()) throw std::invalid_argument(what + ": empty item in '" + text + "'");
    if (std::find(names.begin(), names.end(), item) == names.end()) names.push_back(item);
  }
  if (names.empty()) throw std::invalid_argument(what + ": empty list");
  return names;
}

}  // namespace mxmoe::perf
