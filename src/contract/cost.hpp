// A roofline cost model backends use for estimate_us(): a MoE call streams the weights of
// every expert it touches and does 2 flops per weight per routed token; it takes as long as
// the slower of the two. Each backend passes its own sustained per-thread rates.
#pragma once

#include "mxmoe/deployment.hpp"

namespace mxmoe {

struct Throughput {
  double weight_gb_per_s_per_thread = 0;  // sustained weight streaming (packed bytes)
  double gflop_per_s_per_thread = 0;      // sustained GEMM compute
};

struct CallWork {
  double weight_bytes = 0;  // expert (and shared-expert) weights read once per call
  double flops = 0;
  int threads = 1;
};

// The work of one forward call at d.request.tokens_hint tokens on this rank: experts
// touched = min(local experts, tokens * top_k * local share, rounded up), the local share
// being the rank's fraction of the experts under placement_of(request); bytes per expert from
// MXFP4 (4 bits + an E8M0 scale per 32) plus float32 biases; threads = request.threads, or
// the Hardware's logical CPUs when 0. packed_bytes_per_weight overrides the MXFP4 density
// for backends that repack (e.g. 1 for int8, 2 for bf16).
CallWork call_work(const Deployment& d, double packed_bytes_per_weight = 17.0 / 32.0);

// max(bytes / bandwidth, flops / compute) in microseconds, both rates scaled by threads: the
// roofline of any work (a dense kernel's call too).
double roofline_us(const CallWork& w, const Throughput& per_thread);

// roofline_us of call_work(d, packed_bytes_per_weight).
double roofline_estimate_us(const Deployment& d, const Throughput& per_thread,
                            double packed_bytes_per_weight = 17.0 / 32.0);

}  // namespace mxmoe
