// Deployment = {LayerSpec, Hardware, Request}: everything the oracle judges, frozen plain
// data with a JSON round trip, so a failing case can be saved on one machine and replayed
// (explained) on another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// The format both GEMM inputs (x and the expert's intermediate activation) are rounded to,
// per token. Every format here is per-token (per 32-element block at most), so none
// depends on other tokens of the batch.
enum class ActivationFormat : std::uint8_t {
  f32,    // no rounding
  bf16,   // round to nearest even bf16
  int8,   // symmetric int8 per 32-element block, float32 scale per block
  mxfp8,  // E4M3 elements, E8M0 scale per 32 (round-up scale rule: never clips)
};
MXMOE_API std::string_view to_string(ActivationFormat) noexcept;
MXMOE_API ActivationFormat parse_activation_format(std::string_view);  // throws, listing valid keys
MXMOE_API std::vector<ActivationFormat> all_activation_formats();

// The most tokens one call may carry: the bound of Request::tokens_hint and of the CLI's
// --tokens (a million tokens of gpt-oss-20b are 11.5 GB of input alone).
inline constexpr int kMaxTokensPerCall = 1 << 20;

// What the user asks for. Built at the edge from flags and environment variables
// (flags win over MXMOE_* variables; see config.hpp); pure data afterwards.
struct MXMOE_API Request {
  std::optional<ActivationFormat> activation;  // unset: the family preference decides
  bool batch_invariant = false;
  int ep_size = 1;  // expert-parallel world size
  int ep_rank = 0;  // this process's rank in it
  // The rank of each routed expert (Placement's table); empty: contiguous ranges. Read it
  // through placement_of() (mxmoe/placement.hpp), never directly.
  std::vector<int> placement;
  int threads = 0;             // 0: all logical CPUs of the Hardware; else 1..kMaxThreads
  int tokens_hint = 1;         // expected tokens per call (ranks backends by estimated cost)
  std::string forced_backend;  // "" = let the oracle choose
  std::vector<std::string> excluded_backends;
  // Judge-only backends (`reference`: obviously correct, hundreds of times slower) are
  // chosen only when forced by name or allowed here (--allow-reference).
  bool allow_judge_only = false;
  friend bool operator==(const Request&, const Request&) = default;
};

struct MXMOE_API Deployment {
  LayerSpec layer;
  Hardware hardware;
  Request request;
  friend bool operator==(const Deployment&, const Deployment&) = default;
};

MXMOE_API std::string to_json(const Request&);
// Strict; throws std::invalid_argument. Numbers are range-checked (threads 0..kMaxThreads,
// tokens_hint 1..kMaxTokensPerCall, ep_size 1..kMaxExperts, ep_rank 0..kMaxExperts - 1);
// "allow_judge_only" and "placement" (each entry a rank in 0..kMaxExperts - 1; checked
// against the layer by placement_of) may be absent (files written before them): false, empty.
MXMOE_API Request request_from_json(std::string_view);
MXMOE_API std::string to_json(const Deployment&);
MXMOE_API Deployment
    deployment_from_json(std::string_view);  // strict; throws std::invalid_argument

}  // namespace mxmoe
