// The nanobind headers the extension uses, in one place.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

namespace mxmoe::python {
namespace nb = nanobind;
}  // namespace mxmoe::python
