// mxmoe's dense kernels for an engine's own layers (_DenseLinear) and a row softmax
// (_row_softmax): each output row's bits depend only on that row of the input, never on the
// other rows of the call or the thread count. The vLLM plugin's VLLM_BATCH_INVARIANT=1 computes
// vLLM's matmuls and reductions on the CPU with them (docs/VLLM.md).
#include "mxmoe/dense.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "edge.hpp"
#include "nb.hpp"

namespace mxmoe::python {
namespace {

ElementType element_of(const WeightArray& w) {
  return w.tensor.dtype == TensorDtype::f32 ? ElementType::f32 : ElementType::bf16;
}

// W [out, in] (float32 or bfloat16, C-contiguous, read in place: held alive by this object)
// and an optional bias [out].
struct PyDenseLinear {
  PyDenseLinear(nb::handle weight_obj, nb::handle bias_obj, int threads)
      : weight(read_weight(weight_obj, "weight", false)) {
    if (weight.tensor.shape.size() != 2)
      throw nb::value_error(("weight: expected a 2-D array [out, in], got " +
                             std::to_string(weight.tensor.shape.size()) + " dimensions")
                                .c_str());
    DenseMatrix m{.name = "weight",
                  .element = element_of(weight),
                  .data = weight.tensor.data,
                  .out = weight.tensor.shape[0],
                  .in = weight.tensor.shape[1]};
    if (!bias_obj.is_none()) {
      bias = read_weight(bias_obj, "bias", false);
      if (bias->tensor.shape.size() != 1 || bias->tensor.shape[0] != m.out)
        throw nb::value_error(
            ("bias: expected a 1-D array of " + std::to_string(m.out) + " (weight's out)").c_str());
      m.bias = bias->tensor.data;
      m.bias_element = element_of(*bias);
    }
    runtime = shared_runtime(threads);
    linear = std::make_unique<DenseLinear>(m, probe());
  }

  nb::object forward(nb::handle x_obj, nb::handle out) {
    require_in_place(weight);
    if (bias) require_in_place(*bias);
    const Matrix x = read_matrix(x_obj, {"x", {Element::f32}, -1, linear->in(), "rows", "in"});
    std::vector<ArrayBytes> inputs{bytes_of(x, "x")};
    Result y(out, x, linear->out(), inputs);
    if (x.rows > 0) {
      nb::gil_scoped_release release;
      std::vector<std::byte> scratch;
      const std::byte* xp = contiguous_bytes(x, scratch);
      linear->forward(reinterpret_cast<const float*>(xp), x.rows,
                      reinterpret_cast<float*>(y.data()), *runtime);
    }
    return y.finish();
  }

  WeightArray weight;
  std::optional<WeightArray> bias;
  std::shared_ptr<Runtime> runtime;
  std::unique_ptr<DenseLinear> linear;
};

// softmax (or log_softmax) of each row of x [rows, n] float32: per row, in increasing column
// order, m = the largest element, s = the sum of exp(x - m) in double, then
// exp(x - m) / s (or x - m - log(s)), each rounded once to float32. Serial: nothing depends
// on the other rows.
nb::object row_softmax(nb::handle x_obj, bool log, nb::handle out) {
  const Matrix x = read_matrix(x_obj, {"x", {Element::f32}, -1, -1, "rows", "columns"});
  std::vector<ArrayBytes> inputs{bytes_of(x, "x")};
  Result y(out, x, x.cols, inputs);
  if (x.rows > 0 && x.cols > 0) {
    nb::gil_scoped_release release;
    std::vector<std::byte> scratch;
    const auto* xp = reinterpret_cast<const float*>(contiguous_bytes(x, scratch));
    auto* yp = reinterpret_cast<float*>(y.data());
    const std::int64_t n = x.cols;
    for (std::int64_t r = 0; r < x.rows; ++r) {
      const float* row = xp + r * n;
      float* dst = yp + r * n;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t i = 0; i < n; ++i) m = std::isnan(row[i]) || row[i] > m ? row[i] : m;
      if (std::isinf(m) && m < 0) m = 0.0f;  // a row of -inf: exp(-inf) = 0, s = 0
      const double md = static_cast<double>(m);
      double s = 0.0;
      for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(row[i]) - md);
      if (log) {
        const double shift = md + std::log(s);
        for (std::int64_t i = 0; i < n; ++i)
          dst[i] = static_cast<float>(static_cast<double>(row[i]) - shift);
      } else {
        for (std::int64_t i = 0; i < n; ++i)
          dst[i] = static_cast<float>(std::exp(static_cast<double>(row[i]) - md) / s);
      }
    }
  }
  return y.finish();
}

}  // namespace

void bind_dense(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<PyDenseLinear>(m, "_DenseLinear")
      .def(nb::init<nb::handle, nb::handle, int>(), "weight"_a, "bias"_a.none(), "threads"_a)
      .def("forward", &PyDenseLinear::forward, "x"_a, "out"_a = nb::none())
      .def_prop_ro("in_features", [](const PyDenseLinear& d) { return d.linear->in(); })
      .def_prop_ro("out_features", [](const PyDenseLinear& d) { return d.linear->out(); })
      .def_prop_ro("kernel", [](const PyDenseLinear& d) { return d.linear->kernel(); });
  m.def("_row_softmax", &row_softmax, "x"_a, "log"_a, "out"_a = nb::none());
}

}  // namespace mxmoe::python
