#include "backends/expert_batch.hpp"

#include <algorithm>

namespace mxmoe {

ExpertBatch group_dispatched_slots(const std::int32_t* ids, const std::int32_t* rows,
                                   std::int64_t slots, ExpertRange local, std::int32_t* offsets,
                                   std::int32_t* cursor, std::int32_t* order) noexcept {
  const int n = local.size();
  std::fill(offsets, offsets + n + 1, 0);
  for (std::int64_t s = 0; s < slots; ++s)
    if (local.contains(ids[s])) ++offsets[ids[s] - local.begin + 1];
  for (int e = 0; e < n; ++e) offsets[e + 1] += offsets[e];
  std::copy(offsets, offsets + n, cursor);
  for (std::int64_t s = 0; s < slots; ++s)
    if (local.contains(ids[s]))
      order[cursor[ids[s] - local.begin]++] = static_cast<std::int32_t>(s);
  return ExpertBatch{slots, n, offsets, order, rows};
}

ExpertBatch group_slots(const std::int32_t* ids, std::int64_t slots, int top_k, ExpertRange local,
                        std::int32_t* offsets, std::int32_t* cursor, std::int32_t* order,
                        std::int32_t* rows) noexcept {
  for (std::int64_t s = 0; s < slots; ++s) rows[s] = static_cast<std::int32_t>(s / top_k);
  return group_dispatched_slots(ids, rows, slots, local, offsets, cursor, order);
}

void group_slots(const std::vector<std::int32_t>& ids, int top_k, int num_experts,
                 GroupedSlots& out) {
  const auto slots = static_cast<std::int64_t>(ids.size());
  out.offsets.assign(static_cast<std::size_t>(num_experts) + 1, 0);
  out.order.assign(ids.size(), 0);
  out.rows.assign(ids.size(), 0);
  std::vector<std::int32_t> cursor(static_cast<std::size_t>(num_experts));
  out.batch = group_slots(ids.data(), slots, top_k, ExpertRange{0, num_experts}, out.offsets.data(),
                          cursor.data(), out.order.data(), out.rows.data());
}

}  // namespace mxmoe
