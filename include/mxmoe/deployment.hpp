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
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {

// The most tokens one call may carry: the bound of Request::tokens_hint and of the CLI's
// --tokens (a million tokens of gpt-oss-20b are 11.5 GB of input alone).
inline constexpr int kMaxTokensPerCall = 1 << 20;

// The activation format of a Request that leaves it unset, when no family preference says
// otherwise (Preferences::default_activation, mxmoe/judge.hpp, starts from it).
inline constexpr ActivationFormat kDefaultActivation = ActivationFormat::bf16;

// What the user asks for. Built at the edge from flags and environment variables
// (flags win over MXMOE_* variables; see environment.hpp); pure data afterwards.
struct MXMOE_API Request {
  std::optional<ActivationFormat> activation;  // unset: the family preference decides
  bool batch_invariant = false;
  int ep_size = 1;  // expert-parallel world size
  int ep_rank = 0;  // this process's rank in it
  // The rank of each routed expert (Placement's table); empty: contiguous ranges. Read it
  // through placement_of() (below), never directly.
  std::vector<int> placement;
  int threads = 0;             // 0: all logical CPUs of the Hardware; else 1..kMaxThreads
  int tokens_hint = 1;         // expected tokens per call (ranks backends by estimated cost)
  std::string forced_backend;  // "" = let the oracle choose
  std::vector<std::string> excluded_backends;
  // The reference backend (`reference`: obviously correct, hundreds of times slower, the one
  // the others are checked against) is chosen only when forced by name or allowed here
  // (--allow-reference).
  bool allow_reference = false;
  friend bool operator==(const Request&, const Request&) = default;
};

struct MXMOE_API Deployment {
  LayerSpec layer;
  Hardware hardware;
  Request request;
  friend bool operator==(const Deployment&, const Deployment&) = default;
};

// The placement a deployment runs: Request::placement when it is set (checked against
// num_experts and ep_size), else Placement::contiguous(num_experts, ep_size). Throws
// std::invalid_argument naming the problem (the oracle reports it as expert_parallel).
MXMOE_API Placement placement_of(const Request& request, int num_experts);

MXMOE_API std::string to_json(const Request&);
// Strict; throws std::invalid_argument. Numbers are range-checked (threads 0..kMaxThreads,
// tokens_hint 1..kMaxTokensPerCall, ep_size 1..kMaxExperts, ep_rank 0..kMaxExperts - 1);
// "allow_reference" and "placement" (each entry a rank in 0..kMaxExperts - 1; checked
// against the layer by placement_of) may be absent (files written before them): false, empty.
MXMOE_API Request request_from_json(std::string_view);
MXMOE_API std::string to_json(const Deployment&);
MXMOE_API Deployment
    deployment_from_json(std::string_view);  // strict; throws std::invalid_argument

}  // namespace mxmoe
