// mxmoe::DenseLinear (include/mxmoe/dense.hpp): the public face of dense::Linear in its
// as_published mode, on a Runtime's pool (so it lives in runtime/, above backends/).
#include "backends/dense/dense_linear.hpp"

#include "mxmoe/dense.hpp"
#include "runtime/bind_linear.hpp"
#include "runtime/runtime_pool.hpp"

namespace mxmoe {

struct DenseLinear::Impl {
  dense::Linear linear;
};

DenseLinear::DenseLinear(const DenseMatrix& w, const Hardware& hardware)
    : impl_(std::make_unique<Impl>(Impl{bind_linear(
          dense::LinearWeights{w.name, w.element, w.data, w.out, w.in, w.bias, w.bias_element},
          dense::DenseMode::as_published, hardware)})) {}

DenseLinear::~DenseLinear() = default;
DenseLinear::DenseLinear(DenseLinear&&) noexcept = default;
DenseLinear& DenseLinear::operator=(DenseLinear&&) noexcept = default;

void DenseLinear::forward(const float* x, std::int64_t m, float* y,
                          Runtime& runtime) const noexcept {
  impl_->linear.forward(x, m, y, pool_of(runtime));
}

std::int64_t DenseLinear::in() const noexcept {
  return impl_->linear.in();
}
std::int64_t DenseLinear::out() const noexcept {
  return impl_->linear.out();
}
std::string DenseLinear::kernel() const {
  return impl_->linear.kernel_name();
}

}  // namespace mxmoe
