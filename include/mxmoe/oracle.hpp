// The oracle: one selector judges every backend on every predicate and keeps every reason
// as a structured record. There is no other selection path: model families pass their
// preferences into the same select() as data.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"

namespace mxmoe {

// The closed catalogue of reasons a backend can refuse a deployment. Documented, one row
// per code, in docs/REASON_CODES.md; every code is produced by some test deployment.
enum class ReasonCode : std::uint8_t {
  unsupported_isa,    // the CPU lacks an instruction set the backend needs
  os_denied,          // the CPU has it, the OS refused its state (XCR0 / AMX permission)
  not_compiled,       // the backend was left out of this build
  weight_format,      // expert weights are in a format the backend cannot read
  activation_format,  // the requested activation format is not implemented by the backend
  activation_fn,      // the expert nonlinearity is not implemented by the backend
  routing,            // the routing method is not supported
  shape_alignment,    // a dimension violates the backend's alignment/size rules
  batch_invariance,   // batch invariance requested and not proven for this backend/format
  expert_parallel,    // the expert-parallel configuration is invalid or unsupported
  no_device,          // the backend needs a device (GPU) the Hardware does not have
  user_excluded,      // the user excluded it (--exclude / MXMOE_EXCLUDE_BACKENDS)
  not_forced,         // another backend was forced (--backend / MXMOE_BACKEND)
  reference_only,     // the reference backend: chosen only when forced or allowed
};
MXMOE_API std::string_view to_string(ReasonCode) noexcept;
MXMOE_API std::vector<ReasonCode> all_reason_codes();
MXMOE_API ReasonCode
    parse_reason_code(std::string_view);  // throws std::invalid_argument listing names

// One failed predicate.
struct MXMOE_API Rejection {
  ReasonCode code;
  std::string detail;    // a sentence: what is wrong
  std::string required;  // what the backend needs ("avx512_vnni", "multiple of 32", ...)
  std::string actual;    // what the deployment has
  std::string remedy;    // what the user can do, "" when nothing
  friend bool operator==(const Rejection&, const Rejection&) = default;
};

class ExpertKernel;  // src/backends/kernel.hpp: a backend's packed weights + compute
struct LayerWeights;

// A backend: a name, a description, an honest check() and a factory for its kernel.
class MXMOE_API Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual std::string_view description() const noexcept = 0;
  // ALL failing predicates for this deployment (empty = supported). Never throws for a
  // well-formed Deployment; pure (reads nothing but its argument).
  virtual std::vector<Rejection> check(const Deployment& d) const = 0;
  // Estimated microseconds per forward call at d.request.tokens_hint tokens (only called
  // when check() passed). Ranks supported candidates.
  virtual double estimate_us(const Deployment& d) const = 0;
  // The reference the others are checked against (obviously correct, hundreds of times
  // slower): the oracle chooses it only when the Request forces it by name or sets
  // allow_reference. (The oracle judges; the reference is what verify compares with.)
  virtual bool is_reference() const noexcept { return false; }
  // Its numerics class: the backends of one class give identical bits for the same input
  // (docs/INVARIANCE.md). "int8_block32", "int16_block32" (bf16 activations carried as int16
  // per 32-block), "fp32_strips", "bf16_dpbf16_strips", "bf16_amx_tiles",
  // "float64_reference"; explain and docs/BACKENDS.md report it.
  virtual std::string_view numerics_class() const noexcept = 0;
  // Names this backend was registered under before (docs/ARCHITECTURE.md, "Backend names"):
  // accepted wherever a name is read (--backend, MXMOE_BACKEND, exclusions, params.backend,
  // a deployment's JSON) and reported by name(). Empty for most.
  virtual std::span<const std::string_view> former_names() const noexcept { return {}; }
  // Packs the weights into the backend's layout. Only called when check(d) passed.
  virtual std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                               const LayerWeights& weights) const = 0;
};

// A model family's wishes, as data: the activation format used when the Request leaves it
// unset, and an ordering that breaks ties between candidates of equal estimated cost.
struct MXMOE_API Preferences {
  std::string source = "default";  // "gpt_oss family", for reports
  ActivationFormat default_activation = ActivationFormat::bf16;
  // Backend names, preferred first; ties between unlisted ones (all of them when empty, as
  // for every family today) follow the candidates' order, the registry's best-known-first.
  std::vector<std::string> order;
};
MXMOE_API Preferences preferences_for(Family family);

struct MXMOE_API Verdict {
  std::string name;
  std::string numerics_class;  // Backend::numerics_class()
  bool supported = false;
  std::vector<Rejection> reasons;  // all of them; empty when supported
  // When supported: the estimate that ranks it, microseconds per call of the whole layer
  // (ep_size=1) at tokens_hint; for a batch-invariant request, summed over 1, 8, 64 and 512
  // tokens (docs/ORACLE.md).
  double estimated_us = 0;
  friend bool operator==(const Verdict&, const Verdict&) = default;
};

// The single change of the Request that would let some candidate run.
struct MXMOE_API Suggestion {
  std::string change;   // "batch_invariant=false", "activation=bf16", ...
  std::string backend;  // the candidate it would allow
  std::string text;     // "batch_invariant=false would allow amx_int8"
  friend bool operator==(const Suggestion&, const Suggestion&) = default;
};

struct MXMOE_API Selection {
  Deployment deployment;  // as judged (activation resolved from preferences)
  std::string preferences_source;
  std::vector<Verdict> candidates;      // every registered backend, excluded ones included
  std::string chosen;                   // "" when none fits
  std::string why;                      // "forced", "lowest estimated cost (12.3 us)", ...
  std::vector<Suggestion> suggestions;  // filled when none fits
  friend bool operator==(const Selection&, const Selection&) = default;
};

MXMOE_API std::string to_json(const Selection&);
MXMOE_API Selection selection_from_json(std::string_view);
// The report of `mxmoe explain --json` (also the Python package's mxmoe.explain() and
// Layer.selection): {selected, why, preferences, deployment, candidates (name, supported,
// estimated_us or null, reasons), error (the NoBackendError message, or null), suggestions}.
// A report for people and tools; to_json above is the form that reads back.
MXMOE_API std::string explain_json(const Selection&);

// The registered backends (the list in src/backends/backends.inc), immutable.
MXMOE_API std::span<const Backend* const> registered_backends();
// The candidate that answers to NAME: its name, or one of its former_names(); nullptr when
// none does. The one-argument form looks among the registered backends.
MXMOE_API const Backend* find_backend(std::string_view name,
                                      std::span<const Backend* const> candidates);
MXMOE_API const Backend* find_backend(std::string_view name);
// The candidates' names, comma-separated, for messages listing the valid ones.
MXMOE_API std::string backend_names(
    std::span<const Backend* const> candidates = registered_backends());
// The one message for a NAME no candidate answers to, whoever read it (flags, MXMOE_*
// variables, C API fields, judge()): "WHAT: unknown backend 'NAME'; valid backends: A, B"
// (NAME made printable; "none registered" for no candidates). Each caller throws it as its
// own error type (a usage error, a ConfigError, std::invalid_argument).
MXMOE_API std::string unknown_backend_message(
    std::string_view what, std::string_view name,
    std::span<const Backend* const> candidates = registered_backends());

// Judges every candidate. Never throws for lack of a backend: returns chosen == "" then.
// Throws std::invalid_argument for an unknown forced/excluded backend name (message lists
// the valid names). With the dispatch log category on (MXMOE_VERBOSE=dispatch, log.hpp), it
// logs one line per candidate.
MXMOE_API Selection judge(const Deployment& d, const Preferences& prefs,
                          std::span<const Backend* const> candidates = registered_backends());

// judge(), then throws NoBackendError when nothing fits.
MXMOE_API Selection select(const Deployment& d, const Preferences& prefs,
                           std::span<const Backend* const> candidates = registered_backends());

// Thrown by select(). what() starts with "No MXFP4 MoE backend supports the deployment
// configuration." and carries every reason and the suggestions; selection() is the
// structured report.
class MXMOE_API NoBackendError : public std::runtime_error {
 public:
  explicit NoBackendError(Selection s);
  // The same with another message (what()): why a replayed selection cannot run here, or an
  // expert-parallel group's gathered report.
  NoBackendError(Selection s, const std::string& message);
  const Selection& selection() const noexcept { return selection_; }

 private:
  Selection selection_;
};
MXMOE_API std::string format_no_backend_message(const Selection& s);

// An expert-parallel group's one selection, from every rank's judge() (ranks[r] is rank r's;
// each rank judges its own Hardware). A candidate is supported when every rank supports it;
// its reasons are every rank's (one that every rank gives is kept as is, any other gets its
// detail prefixed "rank R: "); its estimate is the slowest rank's; the choice then follows
// judge()'s rules. The result carries ranks[self].deployment, and chosen == "" when no
// candidate runs on every rank. Every rank computes the same choice from the same inputs, so
// the group runs one backend (one numerics class, as a batch-invariant request needs).
// Throws std::invalid_argument when the ranks judged different layers or requests (other than
// ep_rank, threads and tokens_hint), naming the rank.
MXMOE_API Selection agree(std::span<const Selection> ranks, int self, const Preferences& prefs);
// The gathered reasons of such a group, one line per (rank, rejected candidate, reason):
// "rank 2: amx_bf16 rejected: unsupported_isa: ..." ("every rank: ..." when all give it).
MXMOE_API std::string format_rank_reasons(std::span<const Selection> ranks);

// A human table of the selection: one line per candidate with verdict and reasons.
MXMOE_API std::string format_selection_table(const Selection& s);

// `mxmoe info --hardware` as text: CPU, caches, usable and absent instruction sets, OS
// refusals, the cap, CUDA devices, where the description came from, the registered backends.
MXMOE_API std::string format_hardware_report(const Hardware& h);

}  // namespace mxmoe
