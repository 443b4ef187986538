// The contract between the oracle and what it judges. Candidate<Op> is what every kind of
// kernel says about itself, whatever it computes: a name, a numerics class, an honest check()
// of an operation and a cost estimate for it. Backend is the MoE expert kind (Op = Deployment)
// with its kernel factory. A second kind, the dense matmuls of a whole model, is
// Candidate<dense::DenseOp> (src/contract/dense_op.hpp, src/backends/dense), judged by the
// same oracle (src/oracle/judge_each.hpp) with the same Rejection, ReasonCode and Verdict
// (mxmoe/verdict.hpp). Internal: a host never sees a backend, only the verdicts on it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/reason_codes.hpp"

namespace mxmoe {

// OP is what the candidate is asked to compute, with everything its check() may read (for a
// Backend: the layer, the Hardware and the Request).
template <class Op>
class Candidate {
 public:
  using Judged = Op;
  virtual ~Candidate() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual std::string_view description() const noexcept = 0;
  // ALL failing predicates for this operation (empty = supported). Never throws for a
  // well-formed Op; pure (reads nothing but its argument).
  virtual std::vector<Rejection> check(const Op& op) const = 0;
  // Estimated microseconds per call (only called when check() passed). Ranks supported
  // candidates.
  virtual double estimate_us(const Op& op) const = 0;
  // The reference the others are checked against (obviously correct, hundreds of times
  // slower): the oracle chooses it only when the request forces it by name or allows it.
  // (The oracle judges; the reference is what verify compares with.)
  virtual bool is_reference() const noexcept { return false; }
  // Its numerics class: the candidates of one class give identical bits for the same input
  // (docs/INVARIANCE.md). "int8_block32", "int16_block32" (bf16 activations carried as int16
  // per 32-block), "fp32_strips", "bf16_dpbf16_strips", "bf16_amx_tiles",
  // "float64_reference"; explain and docs/BACKENDS.md report it.
  virtual std::string_view numerics_class() const noexcept = 0;
  // Names this candidate was registered under before (docs/ARCHITECTURE.md, "Backend
  // names"): accepted wherever a name is read (--backend, MXMOE_BACKEND, exclusions,
  // params.backend, a deployment's JSON) and reported by name(). Empty for most.
  virtual std::span<const std::string_view> former_names() const noexcept { return {}; }
};

class ExpertKernel;  // src/backends/kernel.hpp: a backend's packed weights + compute
struct LayerWeights;

// A MoE expert backend: a Candidate judged on a Deployment (its estimate: microseconds per
// forward call at d.request.tokens_hint tokens; its reference chosen only when the Request
// forces it by name or sets allow_reference), and a factory for its kernel.
class Backend : public Candidate<Deployment> {
 public:
  // The compute peak its inner loop is compared with: one of the classes `mxmoe limits`
  // measures (peak_class_names(), perf/perf.hpp), e.g. "int8_vnni_avx512" for
  // avx512_vnni_int8. The bench reports each row's fraction of it (pct_peak).
  virtual std::string_view peak_class() const noexcept = 0;
  // Packs the weights into the backend's layout. Only called when check(d) passed.
  virtual std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                               const LayerWeights& weights) const = 0;
};

// The candidate that answers to NAME: its name, or one of its former_names(); nullptr when
// none does. (backends/registry.hpp has the form that looks among the registered backends.)
const Backend* find_backend(std::string_view name,
                                      std::span<const Backend* const> candidates);
// The candidates' names, comma-separated, for messages listing the valid ones.
std::string backend_names(std::span<const Backend* const> candidates);
// The one message for a NAME no candidate answers to, whoever read it (flags, MXMOE_*
// variables, C API fields, judge()): "WHAT: unknown backend 'NAME'; valid backends: A, B"
// (NAME made printable; "none registered" for no candidates). Each caller throws it as its
// own error type (a usage error, a ConfigError, std::invalid_argument).
std::string unknown_backend_message(std::string_view what, std::string_view name,
                                              std::span<const Backend* const> candidates);

}  // namespace mxmoe
