// mxmoe._mxmoe: the Python bindings of the C++ API (include/mxmoe/). Every call goes through
// the same C++ entry points an engine uses; compute runs with the GIL released; no C++
// exception escapes except as a Python exception (translate() below, and nanobind's own
// translation of the standard exceptions). The package's
// Python files (python/mxmoe/) build the user-facing API on top (docs/PYTHON.md).
// This file is the module's table of contents: edge.cpp (errors, interrupts, runtimes, the
// request), layers.cpp (Model, Layer, a layer from tensors), llm.cpp (a whole model),
// text.cpp (the tokenizer, streamed text, chat formats), dense.cpp (dense kernels for an
// engine's own layers), functions.cpp (the rest), and
// arrays.cpp (arrays in and out).
#include "bindings.hpp"
#include "edge.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/mxmoe.h"
#include "nb.hpp"

NB_MODULE(_mxmoe, m) {
  m.doc() = "The C++ core of the mxmoe package (use the package mxmoe, documented there).";
  m.attr("__version__") = mxmoe_version();
  // The bounds the package checks arguments against before they reach C++ (python/mxmoe/).
  m.attr("_MAX_THREADS") = mxmoe::kMaxThreads;
  m.attr("_MAX_TOKENS") = mxmoe::kMaxTokensPerCall;
  mxmoe::python::register_errors(m);
  mxmoe::python::bind_layers(m);
  mxmoe::python::bind_functions(m);
  mxmoe::python::bind_llm(m);
  mxmoe::python::bind_text(m);
  mxmoe::python::bind_dense(m);
}
