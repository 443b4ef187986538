// The extension's edge to the library (edge.cpp): what every binding file shares.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/runtime.hpp"
#include "nb.hpp"

namespace mxmoe::python {

// Makes mxmoe.NoBackendError (with .selection, the explain report as a dict), mxmoe.LoadError
// (an OSError) and mxmoe.NumericError (a ValueError), and registers the translator that turns
// the library's exceptions into them (std::invalid_argument is ValueError, as nanobind does);
// reads the main thread's identity for the interrupt check. Called once, at import.
void register_errors(nb::module_& m);

// json.loads(TEXT): the library's JSON reports as Python dicts.
nb::object json_loads(const std::string& text);

// The process's runtime of THREADS workers (0: every logical CPU), shared by every layer that
// asks for it and released with the last of them; its calls poll for Ctrl-C.
std::shared_ptr<Runtime> shared_runtime(int threads);

// This machine's probe, capped by MXMOE_MAX_ISA (as the CLI and the C API do).
Hardware probe();

// The MXMOE_* variables plus the caller's arguments (an argument left at its default takes the
// variable): apply_request_overrides with the keyword arguments' names.
Request make_request(const std::optional<std::string>& activation, bool batch_invariant,
                     int threads, const std::optional<std::string>& backend,
                     const std::vector<std::string>& exclude, int tokens);

}  // namespace mxmoe::python
