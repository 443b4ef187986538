// ExpertParallelLayer: one MoE layer whose routed experts are spread over the ranks of a
// Communicator (a Placement says which rank holds which expert). Each rank holds, checks and
// packs only its experts. A call, with tokens on any ranks (every rank, or only rank 0):
//
//   route on the token's rank -> exchange counts -> send each token's row once to every rank
//   that owns one of its experts, with the slots' expert ids -> the owners compute the
//   unweighted output of every slot -> send the per-slot outputs back -> the token's rank
//   combines them in slot order j = 0..k-1 (+ its shared expert), with MoeLayer::forward's combine.
//
// Returning per-slot outputs, never per-rank partial sums, is what makes a token's output
// bits the same for any number of ranks and any placement: the same kernels compute the same
// (row, expert) products, and the same code adds them in the same order. The price is k x H
// values per token on the way back instead of H (docs/DISTRIBUTED.md).
#pragma once

#include <cstdint>
#include <memory>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/export.h"
#include "mxmoe/layer.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {

// Seconds spent in each step on this rank, summed over calls since the last reset.
struct ExpertParallelTimes {
  double route = 0;     // routing this rank's tokens and packing the dispatch messages
  double dispatch = 0;  // exchanging counts, rows and expert ids (waiting for peers included)
  double compute = 0;   // this rank's experts on the rows that arrived, and the shared expert
  double returns = 0;   // sending the per-slot outputs back (waiting included)
  double combine = 0;   // unpacking them and the weighted sum in slot order
  std::int64_t calls = 0;
  std::uint64_t bytes_sent = 0;  // to other ranks (this rank's own messages not counted)
  std::uint64_t bytes_received = 0;
};

// Collective over comm: judges this rank's Deployment {spec, hw, request} with ep_size =
// comm.size() and ep_rank = comm.rank() (and the placement in request.placement), gathers
// every rank's verdicts and agrees on one backend (agree() in mxmoe/oracle.hpp). Throws
// NoBackendError when no backend runs on every rank: its message starts with the usual
// sentence and lists every rank's reasons ("rank 2: amx_bf16 rejected: unsupported_isa: ...").
// A rank whose judge() throws (an unknown backend name) makes every rank throw
// std::invalid_argument naming it. Throws CommError when a rank does not answer.
MXMOE_API Selection agree_selection(const Deployment& mine, const Preferences& prefs,
                                    Communicator& comm);

// Collective over comm, before a group loads a layer from its ranks' checkpoints: refuses, on
// every rank alike, ranks whose checkpoints differ, naming the first rank that differs from
// rank 0 and what differs: config.json (compared as JSON, so spacing and key order do not
// count, nor top-level keys starting with '_', Hugging Face's bookkeeping such as
// `_name_or_path`; the message names the first key whose value differs, with both values) or
// the safetensors headers (Checkpoint::tensor_table: the first tensor whose dtype, shape,
// byte range or file differs, or that one rank lacks; the files' metadata). CHECKPOINT null:
// this rank's weights come from elsewhere (generated), which differs from any checkpoint.
// Cheap: two digests per rank travel, the texts only when they differ. The experts' bytes are
// compared when the layer is built (ExpertParallelLayer::create). Throws std::invalid_argument
// when they differ, CommError when a rank does not answer.
MXMOE_API void agree_on_checkpoint(Communicator& comm, const Checkpoint* checkpoint);

class MXMOE_API ExpertParallelLayer {
 public:
  // Collective: agree_selection() over {spec, hw, request with this group's ep_size, ep_rank
  // and placement}, then this rank's part. Every rank passes the same spec, request and
  // placement (each its own hardware and weights: views of at least its experts; the router
  // and the shared expert whole). The weights, runtime and comm must outlive the layer.
  static ExpertParallelLayer create(const LayerSpec& spec, const LayerWeights& weights,
                                    const Hardware& hw, Request request, const Placement& placement,
                                    Runtime& runtime, Communicator& comm);
  // From a selection the group agreed on: its request's ep_size and ep_rank must be comm's.
  ExpertParallelLayer(const LayerWeights& weights, Selection agreed, Runtime& runtime,
                      Communicator& comm);
  ~ExpertParallelLayer();
  ExpertParallelLayer(ExpertParallelLayer&&) noexcept;
  ExpertParallelLayer& operator=(ExpertParallelLayer&&) noexcept;

  // Collective: every rank calls it once per layer call with its own tokens x [tokens, H]
  // (tokens may be 0: the rank only serves its experts) and gets their outputs y [tokens, H].
  // y's bits equal MoeLayer::forward's on one process with the same backend. Throws CommError
  // when a rank does not answer within the deadline or sends a malformed message, naming it.
  // After the first call at a given size, it does not allocate. A hash-routed layer
  // (DeepSeek-V4's first layers) needs the tokens' ids [tokens] (the second form; the first
  // throws std::invalid_argument for it on every rank); other layers ignore them.
  void forward(const float* x, std::int64_t tokens, float* y);
  void forward(const float* x, const std::int32_t* token_ids, std::int64_t tokens, float* y);

  const MoeLayer& local() const noexcept;  // this rank's part (its experts)
  const Selection& selection() const noexcept;
  const Placement& placement() const noexcept;
  Communicator& communicator() const noexcept;
  const ExpertParallelTimes& times() const noexcept;
  void reset_times() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
