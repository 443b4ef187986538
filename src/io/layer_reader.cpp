#include "io/layer_reader.hpp"

#include <fmt/core.h>

#include <cstring>

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
  v.dtype = t.info->dtype == StDtype::BF16 ? DType::bf16 : DType::f32;
  v.data = t.data().data();
  v.rows = vector ? 1 : rows;
  v.cols = cols;
  check_finite(t);
  return v;
}

void LayerReader::check_scales(const TensorRef& t, std::int64_t rows,
                               std::int64_t blocks_per_row) const {
  if (!check_) return;
  const auto bytes = t.data();
  const void* nan = std::memchr(bytes.data(), kE8m0Nan, bytes.size());
  if (nan == nullptr) return;
  const auto flat = static_cast<std::int64_t>(static_cast<const std::uint8_t*>(nan) - bytes.data());
  throw LoadError(fmt::format(
      "{}: tensor \"{}\" holds the E8M0 NaN scale 0xFF at index {} (expert {}, row {}, block {})",
      t.file->path(), t.info->name, flat, flat / (rows * blocks_per_row),
      flat / blocks_per_row % rows, flat % blocks_per_row));
}

void LayerReader::check_finite(const TensorRef& t) const {
  if (!check_) return;
  const auto bytes = t.data();
  const bool bf16 = t.info->dtype == StDtype::BF16;
  const std::size_t width = bf16 ? 2 : 4;
  for (std::size_t i = 0; i + width <= bytes.size(); i += width) {
    bool bad = false;
    if (bf16) {
      std::uint16_t v;
      std::memcpy(&v, bytes.data() + i, 2);
      bad = (v & 0x7F80u) == 0x7F80u;
    } else {
      std::uint32_t v;
      std::memcpy(&v, bytes.data() + i, 4);
      bad = (v & 0x7F800000u) == 0x7F800000u;
    }
    if (bad)
      throw LoadError(fmt::format("{}: tensor \"{}\" holds NaN or Inf at index {}", t.file->path(),
                                  t.info->name, i / width));
  }
}

}  // namespace mxmoe::io
