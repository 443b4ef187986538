// The roofline of contract/cost.hpp: the work of one forward call and its time at a
// backend's sustained rates.
#include "contract/cost.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mxmoe/placement.hpp"

namespace mxmoe {

CallWork call_work(const Deployment& d, double packed_bytes_per_weight) {
  const LayerSpec& l = d.layer;
  const Request& r = d.request;
  const double tokens = std::max(1, r.tokens_hint);
  const double hidden = l.hidden, inter = l.intermediate;

  // This rank's share of the experts (the placement may be uneven); with a routing spread
  // evenly over the experts, its share of the slots is the same fraction.
  double share = 1;
  try {
    const Placement p = placement_of(r, l.num_experts);
    if (l.num_experts > 0 && r.ep_rank >= 0 && r.ep_rank < p.ranks())
      share = static_cast<double>(p.count(r.ep_rank)) / l.num_experts;
  } catch (const std::invalid_argument&) {
    // An invalid placement is rejected by check() (expert_parallel); cost it as one rank.
  }
  const double local_experts = std::max(1.0, std::round(share * l.num_experts));
  const double local_slots = std::ceil(tokens * l.top_k * share);
  const double touched = std::min(local_experts, std::max(1.0, local_slots));
  // W1 [2I, H] and W2 [H, I]: 3*H*I weights per expert.
  const double weights_per_expert = 3.0 * hidden * inter;
  const double bias_bytes = l.expert_bias ? 4.0 * (2.0 * inter + hidden) : 0.0;
  const double shared_weights = l.shared_experts > 0 ? 3.0 * hidden * l.shared_intermediate : 0.0;

  // A shared expert that is not MXFP4 runs on the dense kernel every backend shares, which
  // reads bf16 weights (fp8_e4m3 and bf16 sources) or float32 ones.
  const double shared_bytes_per_weight = l.shared_weight_format == ElementType::mxfp4
                                             ? packed_bytes_per_weight
                                         : l.shared_weight_format == ElementType::f32 ? 4.0
                                                                                      : 2.0;

  CallWork w;
  w.weight_bytes = touched * (weights_per_expert * packed_bytes_per_weight + bias_bytes) +
                   shared_weights * shared_bytes_per_weight;
  w.flops = 2.0 * (local_slots * weights_per_expert + tokens * shared_weights);
  w.threads = r.threads > 0 ? r.threads : std::max(1, d.hardware.logical_cpus);
  return w;
}

double roofline_us(const CallWork& w, const Throughput& per_thread) {
  const double threads = std::max(1, w.threads);
  const double bw = std::max(1e-9, per_thread.weight_gb_per_s_per_thread * threads) * 1e9;
  const double compute = std::max(1e-9, per_thread.gflop_per_s_per_thread * threads) * 1e9;
  return std::max(w.weight_bytes / bw, w.flops / compute) * 1e6;
}

double roofline_estimate_us(const Deployment& d, const Throughput& per_thread,
                            double packed_bytes_per_weight) {
  return roofline_us(call_work(d, packed_bytes_per_weight), per_thread);
}

}  // namespace mxmoe
