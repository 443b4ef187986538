// Building an ExpertBatch (kernel.hpp): the counting sort of slots by expert. One
// implementation for the layer's hot path (caller buffers, no allocation) and an owning form
// for tests, benchmarks and tools.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/kernel.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {

// ids [slots]: the expert of each slot, slot s reading row s / top_k. Keeps the slots whose
// expert lies in `local`, numbered from local.begin, stable in the slot index (so ascending
// in the row within an expert). Writes offsets [local.size() + 1], order [kept slots] and
// rows [slots]; cursor [local.size()] is scratch. Returns the ExpertBatch over them.
ExpertBatch group_slots(const std::int32_t* ids, std::int64_t slots, int top_k, ExpertRange local,
                        std::int32_t* offsets, std::int32_t* cursor, std::int32_t* order,
                        std::int32_t* rows) noexcept;

// The same for slots whose rows are given (a dispatch buffer: slot s reads rows[s]): keeps the
// slots whose expert ids[s] lies in `local`, numbered from local.begin, stable in the slot
// index. Writes offsets [local.size() + 1] and order [kept slots]; cursor is scratch.
ExpertBatch group_dispatched_slots(const std::int32_t* ids, const std::int32_t* rows,
                                   std::int64_t slots, ExpertRange local, std::int32_t* offsets,
                                   std::int32_t* cursor, std::int32_t* order) noexcept;

// The same with owned buffers (allocates): every expert of [0, num_experts).
struct GroupedSlots {
  std::vector<std::int32_t> offsets, order, rows;
  ExpertBatch batch;  // points into the vectors above (do not copy a GroupedSlots)
  GroupedSlots() = default;
  GroupedSlots(const GroupedSlots&) = delete;
  GroupedSlots& operator=(const GroupedSlots&) = delete;
};
void group_slots(const std::vector<std::int32_t>& ids, int top_k, int num_experts,
                 GroupedSlots& out);

}  // namespace mxmoe
