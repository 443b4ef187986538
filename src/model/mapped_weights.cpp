#include "model/mapped_weights.hpp"

#include <cstdint>

#include "base/mapped_reads.hpp"

namespace mxmoe {

std::vector<int> mapped_sources(const LayerWeights& w) {
  std::vector<std::uintptr_t> pointers;
  const auto add_pointer = [&](const void* p) {
    if (p != nullptr) pointers.push_back(reinterpret_cast<std::uintptr_t>(p));
  };
  for (const DenseView* v : {&w.router_weight, &w.router_bias, &w.selection_bias, &w.b1, &w.b2})
    add_pointer(v->data);
  add_pointer(w.token_experts.data);
  for (const Mxfp4View* v : {&w.w1, &w.w2, &w.shared_w1, &w.shared_w2})
    if (!v->empty())
      for (const Mxfp4Segment& s : *v->segments) {
        add_pointer(s.blocks);
        add_pointer(s.scales);
      }
  for (const DenseMatrixView* v : {&w.shared_dense_w1, &w.shared_dense_w2})
    for (const DenseMatrixView::Segment& s : v->segment) {
      add_pointer(s.data);
      add_pointer(s.scales);
    }
  return mapped_reads::slots_holding(pointers);
}

}  // namespace mxmoe
