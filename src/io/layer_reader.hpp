// The tensors of one layer under a name prefix, with the checks every layout binder shares:
// presence, dtype and shape (errors name the file, the tensor, the expected and the actual),
// and, when asked, a scan of the values (NaN/Inf in dense tensors, the E8M0 NaN scale 0xFF).
// Views only: nothing is copied.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "io/tensor_set.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::io {

std::string shape_text(const std::vector<std::uint64_t>& shape);
std::vector<std::uint64_t> dims(std::initializer_list<std::int64_t> d);

class LayerReader {
 public:
  // SCALE_EXPERTS, when given, limits the value scan of the routed experts' scales to those
  // experts: an expert-parallel rank reads no page of another rank's experts.
  LayerReader(const TensorSet& set, std::string prefix, bool check_values,
              const std::vector<ExpertRange>* scale_experts = nullptr)
      : set_(set), prefix_(std::move(prefix)), check_(check_values), experts_(scale_experts) {}

  const std::string& prefix() const noexcept { return prefix_; }
  bool check_values() const noexcept { return check_; }
  const TensorRef* find(const std::string& suffix) const;
  const TensorRef& require(const std::string& suffix) const;  // LoadError "missing tensor"
  bool present(const std::string& suffix) const { return find(suffix) != nullptr; }
  void reject_unexpected(const std::string& suffix, const std::string& why) const;

  // LoadError unless t has one of the dtypes / exactly the shape.
  static void expect_dtype(const TensorRef& t, std::initializer_list<StDtype> allowed);
  static void expect_shape(const TensorRef& t, const std::vector<std::uint64_t>& shape);

  // A BF16 or F32 tensor of shape [rows, cols] ([cols] when vector), values checked.
  DenseView dense(const std::string& suffix, std::int64_t rows, std::int64_t cols,
                  bool vector) const;
  // With check_values: LoadError at the first E8M0 0xFF of t, as (matrix, row, block) of a
  // [matrices, rows, blocks_per_row] layout.
  void check_scales(const TensorRef& t, std::int64_t rows, std::int64_t blocks_per_row) const;
  // The same for the routed experts' scales, [experts, rows, blocks_per_row]: only the
  // experts of scale_experts when given (LoadError for a range outside [0, experts)).
  void check_expert_scales(const TensorRef& t, std::int64_t experts, std::int64_t rows,
                           std::int64_t blocks_per_row) const;
  // Whether routed expert E's values are scanned (per-expert tensors, as DeepSeek-V4 stores).
  bool scans_expert(std::int64_t e) const;
  // With check_values: LoadError at the first NaN/Inf of a BF16/F32 tensor.
  void check_finite(const TensorRef& t) const;

 private:
  const TensorSet& set_;
  std::string prefix_;
  bool check_;
  const std::vector<ExpertRange>* experts_;

  void scan_scales(const TensorRef& t, std::int64_t rows, std::int64_t blocks_per_row,
                   std::size_t begin, std::size_t end) const;
};

}  // namespace mxmoe::io
