// Arrays from Python, for the layer calls: any CPU array that speaks DLPack or the buffer
// protocol (numpy, torch, ...) is read in place, checked against the shape and dtype the
// layer expects (errors name the argument, the expected and the actual), and results are
// made in the caller's kind of array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxmoe/edge_checks.hpp"
#include "mxmoe/layer_from_tensors.hpp"
#include "nb.hpp"

namespace mxmoe::python {

// The element types the layer calls take.
enum class Element { f32, bf16, bf16_bits, i32, i64 };
const char* element_name(Element e);  // "float32", "bfloat16", "uint16", "int32", "int64"

// Where results go back to: the input's framework (numpy in, numpy out; torch in, torch out;
// any other DLPack producer: an array object with __dlpack__ and the buffer protocol).
enum class Framework { numpy, torch, other };

// A 2-D CPU array read in place. `array` holds the producer's buffer alive; it is only
// copied or dropped while the GIL is held.
struct Matrix {
  nb::ndarray<nb::ro> array;
  Framework framework = Framework::other;
  Element element = Element::f32;
  const std::byte* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 0;  // in elements
  nb::object numpy_dtype;  // set when a numpy bfloat16 array (ml_dtypes) was read as its bits

  // Row-major, dense and aligned to its element (numpy allows unaligned views, which C++
  // may not read as floats): what the layer reads in place.
  bool contiguous() const {
    return (cols <= 1 || col_stride == 1) && (rows <= 1 || row_stride == cols) &&
           reinterpret_cast<std::uintptr_t>(data) % element_bytes() == 0;
  }
  std::size_t element_bytes() const;
  std::size_t bytes() const { return static_cast<std::size_t>(rows * cols) * element_bytes(); }
};

// What an argument must be: its name, the accepted element types (first = the one named in
// messages when none matches), the rows (-1: any) and columns (0: a 1-D array [rows], read
// as rows x 1; -1: any).
struct Expect {
  const char* name;
  std::vector<Element> elements;
  std::int64_t rows;
  std::int64_t cols;
  const char* rows_name;  // "tokens"
  const char* cols_name;  // "hidden" / "top_k"
};

// Reads OBJ as Expect says, or throws TypeError (not an array, wrong dtype) or ValueError
// (not 2-D, wrong shape, not on the CPU), each naming the argument. bf16_bits: a uint16
// array holds bfloat16 bit patterns (numpy has no bfloat16 of its own).
Matrix read_matrix(nb::handle obj, const Expect& expect, bool bf16_bits = false);

// The row-major bytes of M: M's own when contiguous, else a copy into SCRATCH (grown, never
// shrunk). Called without the GIL.
const std::byte* contiguous_bytes(const Matrix& m, std::vector<std::byte>& scratch);

// The bytes M spans (for a strided view: its lowest to one past its highest element), named.
ArrayBytes bytes_of(const Matrix& m, const char* name);

// The destination of a layer call: the caller's `out` (checked: writable, C-contiguous, the
// input's dtype and shape, overlapping none of INPUTS: require_disjoint, the check of every
// edge) or a new 64-byte aligned buffer that becomes an array of the input's kind.
class Result {
 public:
  Result(nb::handle out, const Matrix& like, std::int64_t cols, std::span<const ArrayBytes> inputs);
  std::byte* data() const { return data_; }
  // The array to return (the caller's `out` itself, or the new array). Needs the GIL.
  nb::object finish();

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  nb::object out_;                          // the caller's array, or empty
  std::unique_ptr<std::byte, Free> owned_;  // the new buffer until it is handed to Python
  std::byte* data_ = nullptr;
  const Matrix* like_;
  std::int64_t rows_, cols_;
};

// A weight of a layer made from tensors (mxmoe.layer_from_tensors): any CPU array that speaks
// DLPack or the buffer protocol, read in place. It must be C-contiguous (refused otherwise,
// never copied: the layer may read it for its whole life) and of one of the dtypes BYTES
// (uint8) or not BYTES (float32 or bfloat16) asks for: TypeError (not an array, wrong dtype)
// or ValueError (strided, not on the CPU), naming the argument.
//
// A layer that computes from the arrays (the reference backend) holds their memory itself, not
// only the tensor object: a torch tensor's storage (so `t.set_(...)` and `t.data = other`,
// which give the tensor object other memory, leave the layer's bytes alive and unchanged), a
// numpy array or another producer's object. What the holder cannot stop (the storage itself
// resized or reallocated: `t.resize_(...)`, numpy's `resize(refcheck=False)`) is found by
// require_in_place before every call, which refuses it by name.
struct WeightArray {
  nb::object owner;  // keeps the memory alive (the producer's array, or its uint16 view)
  nb::ndarray<nb::ro> array;
  HostTensor tensor;
  std::string name;
  Framework framework = Framework::other;
  nb::object memory;  // the memory's holder: a torch tensor's untyped storage, else the object
  std::uintptr_t memory_at = 0;  // where the holder's memory was when the layer was made
  std::size_t memory_bytes = 0;
};
WeightArray read_weight(nb::handle obj, const std::string& name, bool bytes);
// Throws std::runtime_error naming the argument when W's memory is no longer where it was.
void require_in_place(const WeightArray& w);

}  // namespace mxmoe::python
