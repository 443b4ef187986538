#include "arrays.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

namespace mxmoe::python {
namespace {

namespace dl = nb::dlpack;

constexpr dl::dtype kF32{static_cast<std::uint8_t>(dl::dtype_code::Float), 32, 1};
constexpr dl::dtype kBf16{static_cast<std::uint8_t>(dl::dtype_code::Bfloat), 16, 1};
constexpr dl::dtype kU16{static_cast<std::uint8_t>(dl::dtype_code::UInt), 16, 1};
constexpr dl::dtype kI32{static_cast<std::uint8_t>(dl::dtype_code::Int), 32, 1};
constexpr dl::dtype kI64{static_cast<std::uint8_t>(dl::dtype_code::Int), 64, 1};
constexpr dl::dtype kU8{static_cast<std::uint8_t>(dl::dtype_code::UInt), 8, 1};
// torch.float8_e8m0fnu: E8M0 scale bytes as they are (DLPack 1.1's kDLFloat8_e8m0fnu).
constexpr dl::dtype kE8M0{static_cast<std::uint8_t>(dl::dtype_code::Float8_E8M0FNU), 8, 1};

std::string dtype_name(dl::dtype t) {
  std::string base;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int:
      base = "int";
      break;
    case dl::dtype_code::UInt:
      base = "uint";
      break;
    case dl::dtype_code::Float:
      base = "float";
      break;
    case dl::dtype_code::Bfloat:
      base = "bfloat";
      break;
    case dl::dtype_code::Complex:
      base = "complex";
      break;
    case dl::dtype_code::Bool:
      return "bool";
    case dl::dtype_code::Float8_E4M3FN:
      return "float8_e4m3fn";
    case dl::dtype_code::Float8_E5M2:
      return "float8_e5m2";
    case dl::dtype_code::Float8_E8M0FNU:
      return "float8_e8m0fnu";
    default:
      base = std::string("dtype code ") + std::to_string(t.code) + " of ";
      break;
  }
  base += std::to_string(t.bits);
  if (t.lanes != 1) base.append("x").append(std::to_string(t.lanes));
  return base;
}

// The element a dtype is, if it is one the layer calls take.
bool element_of(dl::dtype t, bool bf16_bits, Element& e) {
  if (t == kF32)
    e = Element::f32;
  else if (t == kBf16)
    e = Element::bf16;
  else if (t == kU16 && bf16_bits)
    e = Element::bf16_bits;
  else if (t == kI32)
    e = Element::i32;
  else if (t == kI64)
    e = Element::i64;
  else
    return false;
  return true;
}

dl::dtype dtype_of(Element e) {
  switch (e) {
    case Element::f32:
      return kF32;
    case Element::bf16:
      return kBf16;
    case Element::bf16_bits:
      return kU16;
    case Element::i32:
      return kI32;
    case Element::i64:
      return kI64;
  }
  return kF32;
}

std::string dims(std::int64_t rows, std::int64_t cols, const char* rows_name,
                 const char* cols_name) {
  const std::string r = rows >= 0 ? std::to_string(rows) : std::string(rows_name);
  const std::string c = cols >= 0 ? std::to_string(cols) : std::string(cols_name);
  return "[" + r + ", " + c + "]";
}

std::string shape_text(const nb::ndarray<nb::ro>& a) {
  std::string out = "[";
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(a.shape(i));
  }
  return out + "]";
}

// "[tokens, 2880]", or "[4]" for a vector (cols 0).
std::string expected_dims(const Expect& ex) {
  if (ex.cols != 0) return dims(ex.rows, ex.cols, ex.rows_name, ex.cols_name);
  // Through a stream: GCC 12 misreads short string sums (-Wrestrict).
  std::ostringstream text;
  text << '[';
  if (ex.rows >= 0)
    text << ex.rows;
  else
    text << ex.rows_name;
  text << ']';
  return text.str();
}

// "a float32 or bfloat16 array of shape [tokens, 2880]"
std::string expected_text(const Expect& ex) {
  std::string types;
  for (std::size_t i = 0; i < ex.elements.size(); ++i) {
    if (ex.elements[i] == Element::bf16_bits) continue;  // named by its own message
    if (!types.empty()) types += " or ";
    types += element_name(ex.elements[i]);
  }
  return "a " + types + " array of shape " + expected_dims(ex);
}

std::string python_type_name(nb::handle obj) {
  return nb::borrow<nb::str>(
             nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__name__"))
      .c_str();
}

Framework framework_of(nb::handle obj) {
  nb::object module = nb::getattr(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))),
                                  "__module__", nb::none());
  if (!nb::isinstance<nb::str>(module)) return Framework::other;
  const std::string_view name = nb::borrow<nb::str>(module).c_str();
  if (name.substr(0, 5) == "numpy" && (name.size() == 5 || name[5] == '.')) return Framework::numpy;
  if (name.substr(0, 5) == "torch" && (name.size() == 5 || name[5] == '.')) return Framework::torch;
  return Framework::other;
}

// A numpy array of ml_dtypes' bfloat16: numpy exports neither DLPack nor a buffer format for
// it, so it is read through a uint16 view of the same memory.
bool is_numpy_bfloat16(nb::handle obj) {
  nb::object dtype = nb::getattr(obj, "dtype", nb::none());
  if (dtype.is_none()) return false;
  nb::object name = nb::getattr(dtype, "name", nb::none());
  return nb::isinstance<nb::str>(name) &&
         std::string_view(nb::borrow<nb::str>(name).c_str()) == "bfloat16";
}

std::string device_text(int type, int id) {
  switch (type) {
    case nb::device::cuda::value:
      return std::string("cuda:") + std::to_string(id);
    case nb::device::cuda_host::value:
      return "cuda_host";
    case nb::device::rocm::value:
      return std::string("rocm:") + std::to_string(id);
    case nb::device::metal::value:
      return "metal";
    default:
      return std::string("DLPack device type ") + std::to_string(type);
  }
}

// The byte range [lo, hi) an array's elements occupy.
void byte_span(const std::byte* data, std::int64_t rows, std::int64_t cols, std::int64_t rs,
               std::int64_t cs, std::size_t es, const std::byte*& lo, const std::byte*& hi) {
  lo = hi = data;
  if (rows == 0 || cols == 0) return;
  std::int64_t first = 0, last = 0;
  for (const auto& [n, s] : {std::pair{rows, rs}, std::pair{cols, cs}}) {
    if (s >= 0)
      last += (n - 1) * s;
    else
      first += (n - 1) * s;
  }
  const auto e = static_cast<std::int64_t>(es);
  lo = data + first * e;
  hi = data + (last + 1) * e;
}

}  // namespace

const char* element_name(Element e) {
  switch (e) {
    case Element::f32:
      return "float32";
    case Element::bf16:
      return "bfloat16";
    case Element::bf16_bits:
      return "uint16";
    case Element::i32:
      return "int32";
    case Element::i64:
      return "int64";
  }
  return "?";
}

std::size_t Matrix::element_bytes() const {
  switch (element) {
    case Element::bf16:
    case Element::bf16_bits:
      return 2;
    case Element::f32:
    case Element::i32:
      return 4;
    case Element::i64:
      return 8;
  }
  return 4;
}

namespace {

// OBJ as a CPU array read in place: through DLPack or the buffer protocol, or a numpy array of
// ml_dtypes' bfloat16 through a uint16 view of the same memory (returned in BF16_VIEW, which
// the caller keeps). TypeError when OBJ is not an array ("NAME: expected EXPECTED ..."),
// ValueError when it is not on the CPU.
nb::ndarray<nb::ro> import_cpu_array(nb::handle obj, const std::string& name,
                                     const std::string& expected, nb::object& bf16_view) {
  nb::ndarray<nb::ro> array;
  if (!nb::try_cast(obj, array, false)) {
    if (framework_of(obj) == Framework::numpy && is_numpy_bfloat16(obj)) {
      bf16_view = obj.attr("view")("uint16");
      if (!nb::try_cast(bf16_view, array, false))
        throw nb::type_error((name + ": cannot read the bfloat16 array").c_str());
    } else {
      throw nb::type_error((name + ": expected " + expected +
                            " (numpy, a CPU torch tensor, or any object with __dlpack__ or the "
                            "buffer protocol), got " +
                            python_type_name(obj))
                               .c_str());
    }
  }
  if (array.device_type() != nb::device::cpu::value)
    throw nb::value_error((name + ": the array is on " +
                           device_text(array.device_type(), array.device_id()) +
                           "; mxmoe computes on the CPU (torch: pass " + name + ".cpu())")
                              .c_str());
  return array;
}

}  // namespace

Matrix read_matrix(nb::handle obj, const Expect& ex, bool bf16_bits) {
  Matrix m;
  m.framework = framework_of(obj);
  const std::string name = ex.name;
  nb::object bf16_view;
  m.array = import_cpu_array(obj, name, expected_text(ex), bf16_view);
  if (bf16_view.is_valid()) m.numpy_dtype = obj.attr("dtype");

  const dl::dtype t = m.array.dtype();
  const bool numpy_bf16 = m.numpy_dtype.is_valid();
  Element e{};
  const bool known = element_of(t, bf16_bits || numpy_bf16, e);
  if (numpy_bf16 && e == Element::bf16_bits) e = Element::bf16;
  if (!known || std::find(ex.elements.begin(), ex.elements.end(), e) == ex.elements.end()) {
    std::string text = name + ": expected " + expected_text(ex) + ", got " + dtype_name(t);
    const bool takes_bf16 =
        std::find(ex.elements.begin(), ex.elements.end(), Element::bf16_bits) != ex.elements.end();
    if (takes_bf16 && t == kU16)
      text += " (for bfloat16 bit patterns in a uint16 array pass bf16_bits=True)";
    else if (takes_bf16 && bf16_bits)
      text += " (bf16_bits=True expects a uint16 array of bfloat16 bit patterns)";
    throw nb::type_error(text.c_str());
  }
  if (bf16_bits && e != Element::bf16_bits)
    throw nb::type_error((name +
                          ": bf16_bits=True expects a uint16 array of bfloat16 bit "
                          "patterns, got " +
                          (numpy_bf16 ? "bfloat16" : dtype_name(t)))
                             .c_str());
  m.element = e;

  const bool vector = ex.cols == 0;
  const std::string shape = expected_dims(ex);
  if (m.array.ndim() != (vector ? 1u : 2u))
    throw nb::value_error((name + ": expected a " + (vector ? "1" : "2") + "-D array of shape " +
                           shape + ", got " + std::to_string(m.array.ndim()) + "-D shape " +
                           shape_text(m.array))
                              .c_str());
  m.rows = static_cast<std::int64_t>(m.array.shape(0));
  m.cols = vector ? 1 : static_cast<std::int64_t>(m.array.shape(1));
  if ((ex.rows >= 0 && m.rows != ex.rows) || (!vector && ex.cols > 0 && m.cols != ex.cols))
    throw nb::value_error(
        (name + ": expected shape " + shape + ", got " + shape_text(m.array)).c_str());
  m.row_stride = m.array.stride(0);
  m.col_stride = vector ? 1 : m.array.stride(1);
  m.data = static_cast<const std::byte*>(m.array.data());
  return m;
}

const std::byte* contiguous_bytes(const Matrix& m, std::vector<std::byte>& scratch) {
  if (m.contiguous()) return m.data;
  const std::size_t es = m.element_bytes();
  if (scratch.size() < m.bytes()) scratch.resize(m.bytes());
  std::byte* dst = scratch.data();
  for (std::int64_t r = 0; r < m.rows; ++r)
    for (std::int64_t c = 0; c < m.cols; ++c) {
      const std::int64_t at = (r * m.row_stride + c * m.col_stride) * static_cast<std::int64_t>(es);
      std::memcpy(dst, m.data + at, es);
      dst += es;
    }
  return scratch.data();
}

void Result::Free::operator()(std::byte* p) const noexcept {
  std::free(p);
}

ArrayBytes bytes_of(const Matrix& m, const char* name) {
  const std::byte *lo, *hi;
  byte_span(m.data, m.rows, m.cols, m.row_stride, m.col_stride, m.element_bytes(), lo, hi);
  return {name, lo, hi};
}

Result::Result(nb::handle out, const Matrix& like, std::int64_t cols,
               std::span<const ArrayBytes> inputs)
    : like_(&like), rows_(like.rows), cols_(cols) {
  const std::size_t es = like.element_bytes();
  const std::size_t bytes = static_cast<std::size_t>(rows_ * cols_) * es;
  if (out.is_none()) {
    const std::size_t size = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
    owned_.reset(static_cast<std::byte*>(std::aligned_alloc(64, size)));
    if (!owned_) throw std::bad_alloc();
    data_ = owned_.get();
    return;
  }

  const std::string expected =
      std::string("a writable C-contiguous ") +
      (like.numpy_dtype.is_valid() ? "bfloat16" : element_name(like.element)) +
      " array of shape [" + std::to_string(rows_) + ", " + std::to_string(cols_) + "]";
  nb::handle target = out;
  nb::object bits;
  if (like.numpy_dtype.is_valid()) {
    if (!is_numpy_bfloat16(out))
      throw nb::type_error(
          ("out: expected " + expected + " (numpy bfloat16, as x), got " + python_type_name(out))
              .c_str());
    bits = out.attr("view")("uint16");
    target = bits;
  }
  nb::ndarray<> o;
  if (!nb::try_cast(target, o, false)) {
    nb::ndarray<nb::ro> read_only;
    if (nb::try_cast(target, read_only, false))
      throw nb::value_error(("out: the array is read-only; expected " + expected).c_str());
    throw nb::type_error(("out: expected " + expected + ", got " + python_type_name(out)).c_str());
  }
  if (o.device_type() != nb::device::cpu::value)
    throw nb::value_error(("out: the array is on " + device_text(o.device_type(), o.device_id()) +
                           "; expected " + expected + " on the CPU")
                              .c_str());
  if (o.dtype() != dtype_of(like.element == Element::bf16 && like.numpy_dtype.is_valid()
                                ? Element::bf16_bits
                                : like.element))
    throw nb::type_error(("out: expected " + expected + ", got " + dtype_name(o.dtype())).c_str());
  if (o.ndim() != 2 || static_cast<std::int64_t>(o.shape(0)) != rows_ ||
      static_cast<std::int64_t>(o.shape(1)) != cols_)
    throw nb::value_error(
        ("out: expected " + expected + ", got shape " + shape_text(nb::ndarray<nb::ro>(o)))
            .c_str());
  const bool contiguous = (cols_ <= 1 || o.stride(1) == 1) &&
                          (rows_ <= 1 || o.stride(0) == cols_) &&
                          reinterpret_cast<std::uintptr_t>(o.data()) % es == 0;
  if (!contiguous)
    throw nb::value_error(("out: expected " + expected +
                           ", got a strided or unaligned array (results are written in place)")
                              .c_str());
  data_ = static_cast<std::byte*>(o.data());
  const ArrayBytes written = dense_bytes("out", data_, bytes);
  require_disjoint(inputs, {&written, 1});
  out_ = nb::borrow(out);
}

nb::object Result::finish() {
  if (out_.is_valid()) return out_;
  const Matrix& like = *like_;
  const std::size_t shape[2] = {static_cast<std::size_t>(rows_), static_cast<std::size_t>(cols_)};
  const dl::dtype dtype = dtype_of(like.numpy_dtype.is_valid() ? Element::bf16_bits : like.element);
  nb::capsule owner(owned_.get(), [](void* p) noexcept { std::free(p); });
  std::byte* data = owned_.release();
  switch (like.framework) {
    case Framework::numpy: {
      nb::object a =
          nb::ndarray<nb::numpy>(data, 2, shape, owner, nullptr, dtype, nb::device::cpu::value)
              .cast();
      return like.numpy_dtype.is_valid() ? a.attr("view")(like.numpy_dtype) : a;
    }
    case Framework::torch:
      return nb::ndarray<nb::pytorch>(data, 2, shape, owner, nullptr, dtype, nb::device::cpu::value)
          .cast();
    case Framework::other:
      break;
  }
  return nb::ndarray<nb::array_api>(data, 2, shape, owner, nullptr, dtype, nb::device::cpu::value)
      .cast();
}

namespace {

struct MemoryPlace {
  std::uintptr_t at = 0;
  std::size_t bytes = 0;
};

// Where HOLDER's memory is now (read_weight's `memory`): a torch storage's data_ptr() and
// nbytes(); a numpy array's data address and nbytes; any other producer's, imported again.
MemoryPlace memory_place(nb::handle holder, Framework framework) {
  switch (framework) {
    case Framework::torch:
      return {nb::cast<std::uintptr_t>(holder.attr("data_ptr")()),
              nb::cast<std::size_t>(holder.attr("nbytes")())};
    case Framework::numpy:
      return {nb::cast<std::uintptr_t>(holder.attr("__array_interface__")["data"][0]),
              nb::cast<std::size_t>(holder.attr("nbytes"))};
    case Framework::other:
      break;
  }
  nb::ndarray<nb::ro> again;
  if (!nb::try_cast(holder, again, false)) return {};
  return {reinterpret_cast<std::uintptr_t>(again.data()), again.nbytes()};
}

}  // namespace

void require_in_place(const WeightArray& w) {
  const MemoryPlace now = memory_place(w.memory, w.framework);
  if (now.at == w.memory_at && now.bytes == w.memory_bytes) return;
  throw std::runtime_error(
      w.name +
      ": the array's memory was reallocated after the layer was made (t.resize_(...), numpy "
      "resize(refcheck=False), ...); this layer reads its weights in place, so it refuses to "
      "read freed memory: make the layer again from the arrays as they are now");
}

WeightArray read_weight(nb::handle obj, const std::string& name, bool bytes) {
  WeightArray w;
  const char* expected = bytes ? "a uint8 array (MXFP4 blocks and E8M0 scales are bytes: pass an "
                                 "int8 tensor as t.view(torch.uint8); scales may also be "
                                 "float8_e8m0fnu)"
                               : "a float32 or bfloat16 array";
  nb::object bf16_view;
  w.array = import_cpu_array(obj, name, expected, bf16_view);
  const bool numpy_bf16 = bf16_view.is_valid();
  w.owner = numpy_bf16 ? bf16_view : nb::borrow(obj);
  const dl::dtype t = w.array.dtype();
  const bool scales = name.find("_scales") != std::string::npos;
  if (bytes && (t == kU8 || (scales && t == kE8M0)))  // an E8M0 scale is its byte
    w.tensor.dtype = TensorDtype::u8;
  else if (!bytes && t == kF32)
    w.tensor.dtype = TensorDtype::f32;
  else if (!bytes && (t == kBf16 || (numpy_bf16 && t == kU16)))
    w.tensor.dtype = TensorDtype::bf16;
  else
    throw nb::type_error((name + ": expected " + expected + ", got " +
                          (numpy_bf16 ? std::string("bfloat16") : dtype_name(t)))
                             .c_str());
  std::int64_t dense_stride = 1;
  for (std::size_t i = w.array.ndim(); i-- > 0;) {
    const auto n = static_cast<std::int64_t>(w.array.shape(i));
    if (n > 1 && w.array.stride(i) != dense_stride)
      throw nb::value_error(
          (name + ": expected a C-contiguous array, got a strided view of shape " +
           shape_text(w.array) +
           " (the layer reads it in place for its whole life and never copies it: pass "
           "t.contiguous() or numpy.ascontiguousarray(a))")
              .c_str());
    dense_stride *= n;
  }
  w.tensor.data = w.array.data();
  for (std::size_t i = 0; i < w.array.ndim(); ++i)
    w.tensor.shape.push_back(static_cast<std::int64_t>(w.array.shape(i)));
  w.name = name;
  w.framework = framework_of(obj);
  w.memory = w.framework == Framework::torch ? obj.attr("untyped_storage")() : nb::borrow(obj);
  const MemoryPlace place = memory_place(w.memory, w.framework);
  w.memory_at = place.at;
  w.memory_bytes = place.bytes;
  return w;
}

}  // namespace mxmoe::python
