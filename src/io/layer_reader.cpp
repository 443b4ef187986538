#include "io/layer_reader.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "model/dense_view.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::io {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<std::uint64_t> dims(std::initializer_list<std::int64_t> d) {
  std::vector<std::uint64_t> out;
  for (const std::int64_t v : d) out.push_back(static_cast<std::uint64_t>(v));
  return out;
}

const TensorRef* LayerReader::find(const std::string& suffix) const {
  return set_.find(prefix_ + suffix);
}

const TensorRef& LayerReader::require(const std::string& suffix) const {
  const TensorRef* ref = find(suffix);
  if (ref == nullptr) throw LoadError("missing tensor \"" + prefix_ + suffix + "\"");
  return *ref;
}

void LayerReader::reject_unexpected(const std::string& suffix, const std::string& why) const {
  if (present(suffix)) throw LoadError("unexpected tensor \"" + prefix_ + suffix + "\": " + why);
}

void LayerReader::expect_dtype(const TensorRef& t, std::initializer_list<StDtype> allowed) {
  std::string names;
  for (const StDtype d : allowed) {
    if (t.info->dtype == d) return;
    names += (names.empty() ? "" : " or ") + std::string(to_string(d));
  }
  throw LoadError(fmt::format("{}: tensor \"{}\" has dtype {}, expected {}", t.file->path(),
                              t.info->name, to_string(t.info->dtype), names));
}

void LayerReader::expect_shape(const TensorRef& t, const std::vector<std::uint64_t>& shape) {
  if (t.info->shape != shape)
    throw LoadError(fmt::format("{}: tensor \"{}\" has shape {}, expected {}", t.file->path(),
                                t.info->name, shape_text(t.info->shape), shape_text(shape)));
}

DenseView LayerReader::dense(const std::string& suffix, std::int64_t rows, std::int64_t cols,
                             bool vector) const {
  const TensorRef& t = require(suffix);
  expect_dtype(t, {StDtype::BF16, StDtype::F32});
  expect_shape(t, vector ? dims({cols}) : dims({rows, cols}));
  DenseView v;
  v.dtype = *element_type(t.info->dtype);  // BF16 or F32, checked above
  v.data = t.data().data();
  v.rows = vector ? 1 : rows;
  v.cols = cols;
  check_finite(t);
  return v;
}

void LayerReader::check_scales(const TensorRef& t, std::int64_t rows,
                               std::int64_t blocks_per_row) const {
  if (check_) scan_scales(t, rows, blocks_per_row, 0, t.data().size());
}

void LayerReader::check_expert_scales(const TensorRef& t, std::int64_t experts, std::int64_t rows,
                                      std::int64_t blocks_per_row) const {
  if (!check_) return;
  if (experts_ == nullptr) return scan_scales(t, rows, blocks_per_row, 0, t.data().size());
  const auto per_expert = static_cast<std::size_t>(rows * blocks_per_row);
  for (const ExpertRange& r : *experts_) {
    if (r.begin < 0 || r.end < r.begin || r.end > experts)
      throw LoadError(fmt::format("experts [{}, {}) to check lie outside the {} experts of {}",
                                  r.begin, r.end, experts, t.info->name));
    scan_scales(t, rows, blocks_per_row, static_cast<std::size_t>(r.begin) * per_expert,
                static_cast<std::size_t>(r.end) * per_expert);
  }
}

bool LayerReader::scans_expert(std::int64_t e) const {
  if (!check_) return false;
  if (experts_ == nullptr) return true;
  for (const ExpertRange& r : *experts_)
    if (e >= r.begin && e < r.end) return true;
  return false;
}

void LayerReader::scan_scales(const TensorRef& t, std::int64_t rows, std::int64_t blocks_per_row,
                              std::size_t begin, std::size_t end) const {
  const auto bytes = t.data();
  end = std::min(end, bytes.size());
  if (begin >= end) return;
  const void* nan = std::memchr(bytes.data() + begin, kE8m0Nan, end - begin);
  if (nan == nullptr) return;
  const auto flat = static_cast<std::int64_t>(static_cast<const std::uint8_t*>(nan) - bytes.data());
  throw LoadError(fmt::format(
      "{}: tensor \"{}\" holds the E8M0 NaN scale 0xFF at index {} (expert {}, row {}, block {})",
      t.file->path(), t.info->name, flat, flat / (rows * blocks_per_row),
      flat / blocks_per_row % rows, flat % blocks_per_row));
}

void LayerReader::check_finite(const TensorRef& t) const {
  if (!check_) return;
  expect_dtype(t, {StDtype::BF16, StDtype::F32});
  const auto bytes = t.data();
  const ElementType type = *element_type(t.info->dtype);
  if (const auto bad = first_non_finite(
          type, bytes.data(), bytes.size() / static_cast<std::size_t>(element_bits(type) / 8)))
    throw LoadError(fmt::format("{}: tensor \"{}\" holds NaN or Inf at index {}", t.file->path(),
                                t.info->name, *bad));
}

}  // namespace mxmoe::io
