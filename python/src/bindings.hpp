// The extension's parts, each adding its classes and functions to the module (module.cpp
// calls them in order, after register_errors in edge.hpp).
#pragma once

#include "nb.hpp"

namespace mxmoe::python {

void bind_layers(nb::module_& m);     // layers.cpp: Layer, _Model, _layer_from_tensors
void bind_functions(nb::module_& m);  // functions.cpp: _explain, _generate, codecs, names
void bind_llm(nb::module_& m);        // llm.cpp: _LLM, a whole model
void bind_text(nb::module_& m);       // text.cpp: _Tokenizer, _TextStream, _render_chat
void bind_dense(nb::module_& m);      // dense.cpp: _DenseLinear, _row_softmax

}  // namespace mxmoe::python
