// ExpertParallelLayer: the forward of an expert-parallel group (mxmoe/expert_parallel.hpp).
//
// Messages of one call, between the token's rank h and an expert's rank o:
//   counts   h -> o: {call number, rows, slots}                       (3 x uint32, every pair)
//   dispatch h -> o: slots {expert id, row in this message} x slots   (2 x int32 each)
//                    rows x H float32 (each token's row once per owner, however many of its
//                    slots that owner has)
//   return   o -> h: slots x H float32, in the order the slots arrived
// The route weights never travel: the combine happens on the token's rank. Everything that
// arrives is checked before use (call number, counts, expert ids, row indices): a malformed
// message is a CommError naming its sender, never an out-of-bounds read.
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "base/mapped_reads.hpp"
#include "model/mapped_weights.hpp"
#include "mxmoe/edge_checks.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "runtime/layer_steps.hpp"

namespace mxmoe {
namespace {

using Clock = std::chrono::steady_clock;
using LayerSteps = MoeLayer::Steps;

double seconds_since(Clock::time_point& t) {
  const Clock::time_point now = Clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

template <class T>
T* grown(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

template <class T>
const std::byte* bytes_of(const T* p) {
  return reinterpret_cast<const std::byte*>(p);
}
template <class T>
std::byte* bytes_of(T* p) {
  return reinterpret_cast<std::byte*>(p);
}

// A layer fails on one rank (bad weights, no memory) while the others are fine: every rank
// learns it, so none waits for a peer that will never call forward.
void agree_that_all_built(Communicator& comm, const std::string& my_error) {
  const std::vector<std::string> errors = allgather_strings(comm, my_error);
  std::string text;
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty())
      text += fmt::format("{}rank {}: {}", text.empty() ? "" : "; ", r, errors[r]);
  if (!text.empty())
    throw std::invalid_argument("the expert-parallel layer could not be built on every rank: " +
                                text);
}

// What every rank of a group must share, as digests (FNV-1a over 32-bit words): [0] the
// layer's shape and what each rank holds whole (the router, its biases and a hash layer's
// tid2eid, as values, so BF16 and F32 storage of the same numbers agree); [1 + e] a sample of
// routed expert e's weights (each projection's first and last row: its E8M0 scales and first 64
// block bytes). Ranks started with different weights (another checkpoint, layer or seed; two
// quantizations of one model with different scale rules, whose routers are the same) would
// otherwise combine silently wrong results. Every rank samples every expert, so the pages of
// experts it does not hold are dropped again once read (with the kernel's 64 KB fault-around,
// sampling them grew a rank's memory by 33 MB over its share: tests/mpi MpiMemory).
constexpr std::size_t kFaultAround = std::size_t{64} << 10;

struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void mix(std::uint64_t v) { h = (h ^ v) * 1099511628211ull; }
};

std::vector<std::uint64_t> layer_digests(const LayerWeights& w, const LayerSpec& spec,
                                         const Placement& placement, int rank) {
  Fnv whole;
  for (const std::int64_t n : {std::int64_t{spec.num_experts}, std::int64_t{spec.top_k},
                               std::int64_t{spec.hidden}, std::int64_t{spec.intermediate}})
    whole.mix(static_cast<std::uint64_t>(n));
  for (const DenseView* v : {&w.router_weight, &w.router_bias, &w.selection_bias}) {
    whole.mix(static_cast<std::uint64_t>(v->empty() ? 0 : v->rows * v->cols));
    if (v->empty()) continue;
    for (std::int64_t i = 0; i < v->rows * v->cols; ++i)
      whole.mix(std::bit_cast<std::uint32_t>(v->at(i)));
  }
  const TokenExpertTable& t = w.token_experts;
  for (std::int64_t token = 0; !t.empty() && token < t.vocab; ++token)
    for (std::int64_t slot = 0; slot < t.top_k; ++slot)
      whole.mix(static_cast<std::uint64_t>(t.at(token, slot)));
  for (const Mxfp4View* v : {&w.w1, &w.w2})
    whole.mix(static_cast<std::uint64_t>(v->empty() ? 0 : v->experts * v->rows * v->cols));

  const std::int64_t experts = std::min(w.w1.experts, w.w2.experts);
  std::vector<std::uint64_t> digests(
      static_cast<std::size_t>(1 + std::max<std::int64_t>(0, experts)));
  digests[0] = whole.h;
  std::vector<std::uintptr_t> others;  // what was read of experts held elsewhere
  const auto sampled = [&](const void* p, std::int64_t e) {
    if (placement.num_experts() > e && placement.owner(static_cast<int>(e)) != rank)
      others.push_back(reinterpret_cast<std::uintptr_t>(p));
  };
  mapped_reads::read_guarded(mapped_sources(w), [&] {
    for (std::int64_t e = 0; e < experts; ++e) {
      Fnv one;
      for (const Mxfp4View* v : {&w.w1, &w.w2})
        for (const std::int64_t r : {std::int64_t{0}, v->rows - 1}) {
          const std::uint8_t* scales = v->row_scale(e, r);
          const std::uint8_t* blocks = v->row_blocks(e, r);
          for (std::int64_t i = 0; i < v->row_scales(); ++i) one.mix(scales[i]);
          for (std::int64_t i = 0; i < std::min<std::int64_t>(64, v->row_bytes()); ++i)
            one.mix(blocks[i]);
          sampled(scales, e);
          sampled(blocks, e);
        }
      digests[static_cast<std::size_t>(1 + e)] = one.h;
    }
  });
  mapped_reads::drop_resident_around(others, kFaultAround);
  return digests;
}

// "0, 1, 2 and 5 more".
std::string first_few(const std::vector<std::int64_t>& items) {
  std::string text;
  for (std::size_t i = 0; i < items.size() && i < 8; ++i)
    text += fmt::format("{}{}", i == 0 ? "" : ", ", items[i]);
  if (items.size() > 8) text += fmt::format(" and {} more", items.size() - 8);
  return text;
}

void agree_on_weights(Communicator& comm, const LayerWeights& weights, const MoeLayer& layer) {
  const std::vector<std::uint64_t> mine =
      layer_digests(weights, layer.spec(), layer.placement(), comm.rank());
  const std::vector<std::string> all =
      allgather_strings(comm, std::string_view(reinterpret_cast<const char*>(mine.data()),
                                               mine.size() * sizeof(std::uint64_t)));
  const auto digests_of = [&](std::size_t r) {
    std::vector<std::uint64_t> d(all[r].size() / sizeof(std::uint64_t));
    std::memcpy(d.data(), all[r].data(), d.size() * sizeof(std::uint64_t));
    return d;
  };
  const std::vector<std::uint64_t> first = digests_of(0);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::uint64_t> theirs = digests_of(r);
    std::string what;
    if (theirs.size() != first.size() || theirs.at(0) != first.at(0)) {
      what = "the layer's shape, router, its biases or hash table";
    } else {
      std::vector<std::int64_t> experts;
      for (std::size_t e = 1; e < first.size(); ++e)
        if (first[e] != theirs[e]) experts.push_back(static_cast<std::int64_t>(e - 1));
      what = fmt::format("the sampled bytes of {} {} ({} of {})",
                         experts.size() == 1 ? "expert" : "experts", first_few(experts),
                         experts.size(), first.size() - 1);
    }
    throw std::invalid_argument(fmt::format(
        "the ranks hold different weights: rank {}'s differ from rank 0's in {}; every rank must "
        "load the same layer (checkpoint, layer index, --seed)",
        r, what));
  }
}

MoeLayer build_part(const LayerWeights& weights, Selection agreed, Runtime& runtime,
                    Communicator& comm) {
  std::string error;
  std::optional<MoeLayer> layer;
  try {
    const Request& r = agreed.deployment.request;
    if (r.ep_size != comm.size() || r.ep_rank != comm.rank())
      throw std::invalid_argument(
          fmt::format("the selection is for rank {} of {}, the communicator is rank {} of {}",
                      r.ep_rank, r.ep_size, comm.rank(), comm.size()));
    if (weights.router_weight.empty())
      throw std::invalid_argument(
          "an expert-parallel layer routes with the layer's router: the weights have none");
    layer.emplace(weights, std::move(agreed), runtime);
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  agree_that_all_built(comm, error);
  agree_on_weights(comm, weights, *layer);
  return std::move(*layer);
}

}  // namespace

struct ExpertParallelLayer::Impl {
  Impl(MoeLayer part, Communicator& c)
      : layer(std::move(part)), comm(&c), placement(layer.placement()) {}

  MoeLayer layer;
  Communicator* comm;
  Placement placement;
  ExpertParallelTimes times;
  std::uint32_t call = 0;

  // Per-peer figures of one call (index: rank).
  std::vector<std::uint32_t> rows_to, slots_to, rows_from, slots_from;
  std::vector<std::size_t> row_base_to, slot_base_to, row_base_from, slot_base_from;
  std::vector<std::int64_t> last_token;      // the last token packed for each peer
  std::vector<std::size_t> row_at, slot_at;  // packing cursors
  std::vector<std::uint32_t> counts_out, counts_in;
  // Buffers; they only grow, so a call at a size seen before allocates nothing.
  std::vector<std::int32_t> ids;                // [M * k] this rank's routing
  std::vector<float> route_weights;             // [M * k]
  std::vector<std::int32_t> out_slots;          // [slots sent, 2]: {expert, row in message}
  std::vector<float> out_rows;                  // [rows sent, H]
  std::vector<std::int32_t> sent_slot;          // [slots sent]: t * k + j of each, in message order
  std::vector<std::int32_t> in_slots;           // [slots received, 2]
  std::vector<float> in_rows;                   // [rows received, H]
  std::vector<std::int32_t> in_ids, in_row_of;  // [slots received]
  std::vector<float> in_out;                    // [slots received, H] the owner's outputs
  std::vector<float> back;                      // [slots sent, H] the outputs returned to this rank
  std::vector<float> slot_out;                  // [M * k, H] in slot order, as forward() holds them
  std::vector<float> shared_out;                // [M, H]
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;

  void forward(const float* x, const std::int32_t* token_ids, std::int64_t tokens, float* y);

 private:
  // The sizes of one call.
  struct CallShape {
    std::size_t peers;   // ranks of the group
    std::size_t h;       // hidden size
    std::size_t tokens;  // this rank's
    std::size_t k;       // slots per token
    std::size_t slots;   // this rank's: tokens * k
  };

  void count_rows_and_slots_to(const CallShape& c);
  void pack_rows_and_slots(const float* x, const CallShape& c);
  void exchange_counts(const CallShape& c);
  void exchange_rows_and_slots(const CallShape& c);
  void check_arriving_slots(const CallShape& c);
  bool compute_arrivals(const float* x, const CallShape& c);
  void return_outputs(const CallShape& c);
  void combine_in_slot_order(bool shared, float* y, const CallShape& c);
  void count_bytes(const CallShape& c);

  CommError malformed(int peer, const std::string& what) const {
    return CommError({peer}, fmt::format("rank {}: rank {} sent a malformed message in call {}: {}",
                                         comm->rank(), peer, call, what));
  }
  void exchange() {
    comm->exchange(sends, recvs);
    sends.clear();
    recvs.clear();
  }
};

// Phase 1: how many rows (each token's row once per owner of one of its slots) and slots
// this rank sends to each peer, and where each peer's start in the packed message buffers.
void ExpertParallelLayer::Impl::count_rows_and_slots_to(const CallShape& c) {
  const std::size_t un = c.peers;
  rows_to.assign(un, 0);
  slots_to.assign(un, 0);
  last_token.assign(un, -1);
  for (std::size_t s = 0; s < c.slots; ++s) {
    const auto d = static_cast<std::size_t>(placement.owner(ids[s]));
    const auto token = static_cast<std::int64_t>(s / c.k);
    if (last_token[d] != token) {
      last_token[d] = token;
      ++rows_to[d];
    }
    ++slots_to[d];
  }
  row_base_to.assign(un + 1, 0);
  slot_base_to.assign(un + 1, 0);
  for (std::size_t d = 0; d < un; ++d) {
    row_base_to[d + 1] = row_base_to[d] + rows_to[d];
    slot_base_to[d + 1] = slot_base_to[d] + slots_to[d];
  }
}

// Phase 1: each token's row once per owner, each slot as {expert, row in the message}, and
// which slot of this rank each sent slot is.
void ExpertParallelLayer::Impl::pack_rows_and_slots(const float* x, const CallShape& c) {
  const std::size_t un = c.peers, h = c.h;
  float* packed_rows = grown(out_rows, row_base_to[un] * h);
  std::int32_t* packed_slots = grown(out_slots, 2 * c.slots);
  std::int32_t* sent = grown(sent_slot, c.slots);
  row_at.assign(row_base_to.begin(), row_base_to.end() - 1);
  slot_at.assign(slot_base_to.begin(), slot_base_to.end() - 1);
  last_token.assign(un, -1);
  for (std::size_t s = 0; s < c.slots; ++s) {
    const std::int32_t e = ids[s];
    const auto d = static_cast<std::size_t>(placement.owner(e));
    const auto token = static_cast<std::int64_t>(s / c.k);
    if (last_token[d] != token) {
      last_token[d] = token;
      std::memcpy(packed_rows + row_at[d]++ * h, x + static_cast<std::size_t>(token) * h,
                  h * sizeof(float));
    }
    const std::size_t i = slot_at[d]++;
    packed_slots[2 * i] = e;
    packed_slots[2 * i + 1] = static_cast<std::int32_t>(row_at[d] - 1 - row_base_to[d]);
    sent[i] = static_cast<std::int32_t>(s);
  }
}

// Phase 2: every pair of ranks swaps {call number, rows, slots}; what arrives is checked and
// gives where each peer's rows and slots start in the arrival buffers.
void ExpertParallelLayer::Impl::exchange_counts(const CallShape& c) {
  const std::size_t un = c.peers;
  const int me = comm->rank();
  grown(counts_out, 3 * un);
  grown(counts_in, 3 * un);
  for (std::size_t d = 0; d < un; ++d) {
    counts_out[3 * d] = call;
    counts_out[3 * d + 1] = rows_to[d];
    counts_out[3 * d + 2] = slots_to[d];
    sends.push_back({static_cast<int>(d), bytes_of(&counts_out[3 * d]), 3 * sizeof(std::uint32_t)});
    recvs.push_back({static_cast<int>(d), bytes_of(&counts_in[3 * d]), 3 * sizeof(std::uint32_t)});
  }
  exchange();
  rows_from.assign(un, 0);
  slots_from.assign(un, 0);
  row_base_from.assign(un + 1, 0);
  slot_base_from.assign(un + 1, 0);
  // Bounds that make every later index and size computation safe: at most 2^31 rows and
  // slots in all, and a row never without a slot.
  constexpr std::size_t kMax = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  for (std::size_t s = 0; s < un; ++s) {
    const int peer = static_cast<int>(s);
    if (counts_in[3 * s] != call)
      throw CommError({peer}, fmt::format("rank {}: rank {} is at layer call {}, this rank at {}: "
                                          "the ranks must call forward() together",
                                          me, s, counts_in[3 * s], call));
    rows_from[s] = counts_in[3 * s + 1];
    slots_from[s] = counts_in[3 * s + 2];
    if (rows_from[s] > slots_from[s] || (slots_from[s] > 0 && rows_from[s] == 0))
      throw malformed(peer, fmt::format("{} rows for {} slots", rows_from[s], slots_from[s]));
    row_base_from[s + 1] = row_base_from[s] + rows_from[s];
    slot_base_from[s + 1] = slot_base_from[s] + slots_from[s];
    if (slot_base_from[s + 1] > kMax)
      throw malformed(peer, fmt::format("{} slots arriving in all", slot_base_from[s + 1]));
  }
}

// Phase 2: the packed slots and rows to their owners (only non-empty messages).
void ExpertParallelLayer::Impl::exchange_rows_and_slots(const CallShape& c) {
  const std::size_t un = c.peers, h = c.h;
  const float* packed_rows = out_rows.data();
  const std::int32_t* packed_slots = out_slots.data();
  const std::size_t rows_in = row_base_from[un], slots_in = slot_base_from[un];
  std::int32_t* arriving_slots = grown(in_slots, 2 * slots_in);
  float* arriving_rows = grown(in_rows, rows_in * h);
  for (std::size_t p = 0; p < un; ++p) {
    const int peer = static_cast<int>(p);
    if (slots_to[p] > 0) {
      sends.push_back({peer, bytes_of(packed_slots + 2 * slot_base_to[p]),
                       2 * sizeof(std::int32_t) * slots_to[p]});
      sends.push_back(
          {peer, bytes_of(packed_rows + row_base_to[p] * h), sizeof(float) * h * rows_to[p]});
    }
    if (slots_from[p] > 0) {
      recvs.push_back({peer, bytes_of(arriving_slots + 2 * slot_base_from[p]),
                       2 * sizeof(std::int32_t) * slots_from[p]});
      recvs.push_back(
          {peer, bytes_of(arriving_rows + row_base_from[p] * h), sizeof(float) * h * rows_from[p]});
    }
  }
  exchange();
}

// Phase 3: every arriving slot names an expert of this rank and a row of its message; into
// in_ids / in_row_of (the row among all arriving rows).
void ExpertParallelLayer::Impl::check_arriving_slots(const CallShape& c) {
  const std::size_t un = c.peers;
  const int me = comm->rank();
  const int num_experts = layer.spec().num_experts;
  const std::size_t slots_in = slot_base_from[un];
  const std::int32_t* arriving_slots = in_slots.data();
  std::int32_t* expert = grown(in_ids, slots_in);
  std::int32_t* row = grown(in_row_of, slots_in);
  for (std::size_t p = 0; p < un; ++p)
    for (std::size_t i = slot_base_from[p]; i < slot_base_from[p + 1]; ++i) {
      const std::int32_t e = arriving_slots[2 * i], r = arriving_slots[2 * i + 1];
      if (e < 0 || e >= num_experts || placement.owner(e) != me)
        throw malformed(static_cast<int>(p),
                        fmt::format("slot {} names expert {}, which rank {} does not hold",
                                    i - slot_base_from[p], e, me));
      if (r < 0 || static_cast<std::size_t>(r) >= rows_from[p])
        throw malformed(static_cast<int>(p), fmt::format("slot {} reads row {} of {}",
                                                         i - slot_base_from[p], r, rows_from[p]));
      expert[i] = e;
      row[i] = static_cast<std::int32_t>(row_base_from[p] + static_cast<std::size_t>(r));
    }
}

// Phase 3: this rank's experts on every arriving slot (into in_out); the shared expert on
// this rank's own tokens (into shared_out). Whether the layer has a shared expert.
bool ExpertParallelLayer::Impl::compute_arrivals(const float* x, const CallShape& c) {
  const std::size_t rows_in = row_base_from[c.peers], slots_in = slot_base_from[c.peers];
  float* computed = grown(in_out, slots_in * c.h);
  LayerSteps::compute_slots(layer, in_rows.data(), static_cast<std::int64_t>(rows_in),
                            in_ids.data(), in_row_of.data(), static_cast<std::int64_t>(slots_in),
                            computed);
  const auto tokens = static_cast<std::int64_t>(c.tokens);
  return tokens > 0 &&
         LayerSteps::shared_expert(layer, x, tokens, grown(shared_out, c.tokens * c.h));
}

// Phase 4: the per-slot outputs go back to the tokens' ranks, in the order the slots came.
void ExpertParallelLayer::Impl::return_outputs(const CallShape& c) {
  const std::size_t h = c.h;
  const float* computed = in_out.data();
  float* returned = grown(back, c.slots * h);
  for (std::size_t p = 0; p < c.peers; ++p) {
    const int peer = static_cast<int>(p);
    if (slots_from[p] > 0)
      sends.push_back(
          {peer, bytes_of(computed + slot_base_from[p] * h), sizeof(float) * h * slots_from[p]});
    if (slots_to[p] > 0)
      recvs.push_back(
          {peer, bytes_of(returned + slot_base_to[p] * h), sizeof(float) * h * slots_to[p]});
  }
  exchange();
}

// Phase 5: the returned outputs back into slot order, then forward()'s own combine.
void ExpertParallelLayer::Impl::combine_in_slot_order(bool shared, float* y, const CallShape& c) {
  const std::size_t h = c.h;
  const float* returned = back.data();
  const std::int32_t* sent = sent_slot.data();
  float* ordered = grown(slot_out, c.slots * h);
  for (std::size_t i = 0; i < c.slots; ++i)
    std::memcpy(ordered + static_cast<std::size_t>(sent[i]) * h, returned + i * h,
                h * sizeof(float));
  LayerSteps::combine(layer, route_weights.data(), ordered, shared ? shared_out.data() : nullptr,
                      static_cast<std::int64_t>(c.tokens), y);
}

// The bytes this call moved between this rank and the others (its own messages excluded).
void ExpertParallelLayer::Impl::count_bytes(const CallShape& c) {
  const int me = comm->rank();
  const std::size_t h = c.h;
  for (std::size_t p = 0; p < c.peers; ++p) {
    if (static_cast<int>(p) == me) continue;
    times.bytes_sent += 3 * sizeof(std::uint32_t) + 2 * sizeof(std::int32_t) * slots_to[p] +
                        sizeof(float) * h * (rows_to[p] + slots_from[p]);
    times.bytes_received += 3 * sizeof(std::uint32_t) + 2 * sizeof(std::int32_t) * slots_from[p] +
                            sizeof(float) * h * (rows_from[p] + slots_to[p]);
  }
}

void ExpertParallelLayer::Impl::forward(const float* x, const std::int32_t* token_ids,
                                        std::int64_t tokens, float* y) {
  const LayerSpec& spec = layer.spec();
  const int k = spec.top_k;
  // The bound of every layer call, before any size is computed from tokens.
  require_call_tokens("ExpertParallelLayer::forward", tokens, k);
  if (tokens > 0 && (x == nullptr || y == nullptr))
    throw std::invalid_argument("ExpertParallelLayer::forward: x or y is null");
  const auto m = static_cast<std::size_t>(tokens);
  const CallShape c{.peers = static_cast<std::size_t>(comm->size()),
                    .h = static_cast<std::size_t>(spec.hidden),
                    .tokens = m,
                    .k = static_cast<std::size_t>(k),
                    .slots = m * static_cast<std::size_t>(k)};
  ++call;
  Clock::time_point t = Clock::now();

  // 1. Route this rank's tokens; pack each token's row once per owner of one of its slots.
  if (tokens > 0)
    LayerSteps::route(layer, x, token_ids, tokens, grown(ids, c.slots),
                      grown(route_weights, c.slots));
  count_rows_and_slots_to(c);
  pack_rows_and_slots(x, c);
  times.route += seconds_since(t);

  // 2. Counts, then the rows and slots themselves (only non-empty messages).
  exchange_counts(c);
  exchange_rows_and_slots(c);
  times.dispatch += seconds_since(t);

  // 3. This rank's experts on every arriving slot; the shared expert on its own tokens.
  check_arriving_slots(c);
  const bool shared = compute_arrivals(x, c);
  times.compute += seconds_since(t);

  // 4. The per-slot outputs go back to the tokens' ranks, in the order the slots came.
  return_outputs(c);
  times.returns += seconds_since(t);

  // 5. Back into slot order, then forward()'s own combine.
  if (tokens > 0) combine_in_slot_order(shared, y, c);
  times.combine += seconds_since(t);

  ++times.calls;
  count_bytes(c);
}

ExpertParallelLayer ExpertParallelLayer::create(const LayerSpec& spec, const LayerWeights& weights,
                                                const Hardware& hw, Request request,
                                                const Placement& placement, Runtime& runtime,
                                                Communicator& comm) {
  request.ep_size = comm.size();
  request.ep_rank = comm.rank();
  request.placement.clear();
  if (placement.num_experts() != 0) {
    if (placement.num_experts() != spec.num_experts || placement.ranks() != comm.size())
      throw std::invalid_argument(fmt::format(
          "the placement covers {} experts on {} ranks; the layer has {} experts and the "
          "communicator {} ranks",
          placement.num_experts(), placement.ranks(), spec.num_experts, comm.size()));
    if (!(placement == Placement::contiguous(spec.num_experts, comm.size())))
      request.placement = placement.owners();
  }
  Selection agreed =
      agree_selection(Deployment{spec, hw, std::move(request)}, preferences_for(spec.family), comm);
  return ExpertParallelLayer(weights, std::move(agreed), runtime, comm);
}

ExpertParallelLayer::ExpertParallelLayer(const LayerWeights& weights, Selection agreed,
                                         Runtime& runtime, Communicator& comm)
    : impl_(std::make_unique<Impl>(build_part(weights, std::move(agreed), runtime, comm), comm)) {}

ExpertParallelLayer::~ExpertParallelLayer() = default;
ExpertParallelLayer::ExpertParallelLayer(ExpertParallelLayer&&) noexcept = default;
ExpertParallelLayer& ExpertParallelLayer::operator=(ExpertParallelLayer&&) noexcept = default;

void ExpertParallelLayer::forward(const float* x, std::int64_t tokens, float* y) {
  // Refused on every rank alike (a rank with no tokens would not route), so none waits.
  if (impl_->layer.spec().routing == RoutingMethod::hash)
    throw std::invalid_argument("ExpertParallelLayer::forward: layer '" + impl_->layer.spec().name +
                                "' is hash-routed (DeepSeek-V4 tid2eid): pass the tokens' ids");
  impl_->forward(x, nullptr, tokens, y);
}

void ExpertParallelLayer::forward(const float* x, const std::int32_t* token_ids,
                                  std::int64_t tokens, float* y) {
  impl_->forward(x, token_ids, tokens, y);
}
const MoeLayer& ExpertParallelLayer::local() const noexcept {
  return impl_->layer;
}
const Selection& ExpertParallelLayer::selection() const noexcept {
  return impl_->layer.selection();
}
const Placement& ExpertParallelLayer::placement() const noexcept {
  return impl_->placement;
}
Communicator& ExpertParallelLayer::communicator() const noexcept {
  return *impl_->comm;
}
const ExpertParallelTimes& ExpertParallelLayer::times() const noexcept {
  return impl_->times;
}
void ExpertParallelLayer::reset_times() noexcept {
  impl_->times = {};
}

}  // namespace mxmoe
