// The extension's edge to the library: the Python exceptions C++ errors become, the
// interrupt check (Ctrl-C), the process's runtimes, this machine's probe and the request
// from the environment plus the caller's arguments (edge.hpp).
#include "edge.hpp"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "mxmoe/edge_checks.hpp"
#include "mxmoe/environment.hpp"
#include "mxmoe/mxmoe.hpp"
#include "mxmoe/tokenizer.hpp"

namespace mxmoe::python {
namespace {

// ---------------------------------------------------------------------------------------
// Errors: mxmoe.NoBackendError (with .selection, the explain report as a dict) and
// mxmoe.LoadError (an OSError), mxmoe.NumericError (a ValueError: an output holding NaN/Inf)
// and mxmoe.UnsupportedTokenizer (a RuntimeError) are made here; std::invalid_argument is ValueError.

struct ErrorTypes {
  PyObject* no_backend = nullptr;
  PyObject* load = nullptr;
  PyObject* numeric = nullptr;
  PyObject* unsupported_tokenizer = nullptr;
};
ErrorTypes& error_types() {
  static ErrorTypes types;  // set once at import; read by the translator
  return types;
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Interrupted&) {
    // interrupt_requested() below left the handler's exception (KeyboardInterrupt) set.
    if (PyErr_Occurred() == nullptr) PyErr_SetNone(PyExc_KeyboardInterrupt);
  } catch (const NoBackendError& e) {
    nb::object error =
        nb::steal(PyObject_CallOneArg(error_types().no_backend, nb::str(e.what()).ptr()));
    if (!error.is_valid()) return;  // the call set its own error
    error.attr("selection") = json_loads(explain_json(e.selection()));
    PyErr_SetObject(error_types().no_backend, error.ptr());
  } catch (const LoadError& e) {
    PyErr_SetString(error_types().load, e.what());
  } catch (const NumericError& e) {
    PyErr_SetString(error_types().numeric, e.what());
  } catch (const UnsupportedTokenizer& e) {
    PyErr_SetString(error_types().unsupported_tokenizer, e.what());
  } catch (const std::system_error& e) {
    PyErr_SetString(PyExc_OSError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  }
}

// ---------------------------------------------------------------------------------------
// The process's runtimes: one per thread count, shared by every layer that asks for it
// (mxmoe::Runtime is the one pool of its layers), released with the last of them.

// The thread that runs Python's signal handlers (the main thread), read at import.
unsigned long& main_thread_ident() {
  static unsigned long ident = 0;  // set once at import
  return ident;
}

// Ctrl-C during a layer call, polled by the runtime between units of work with the GIL
// released (Runtime::set_interrupt_check). On the main thread, the only one Python runs signal
// handlers on, the handlers run: SIGINT's raises KeyboardInterrupt, which stays set (so every
// later poll of the call answers true) until the call has stopped and translate() raises it.
// No other thread takes the GIL here.
bool interrupt_requested() {
  if (PyThread_get_thread_ident() != main_thread_ident()) return false;
  nb::gil_scoped_acquire gil;
  return PyErr_Occurred() != nullptr || PyErr_CheckSignals() != 0;
}

}  // namespace

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

std::shared_ptr<Runtime> shared_runtime(int threads) {
  // The process's one cache (function-local: made at first use, after import), whose runtimes
  // all poll for Ctrl-C.
  static RuntimeCache runtimes([](Runtime& r) { r.set_interrupt_check(interrupt_requested); });
  return runtimes.get(threads);
}

// The edge: this machine's probe, capped by MXMOE_MAX_ISA (as the CLI and the C API do).
Hardware probe() {
  return probe_hardware_from_environment();
}

Request make_request(const std::optional<std::string>& activation, bool batch_invariant,
                     int threads, const std::optional<std::string>& backend,
                     const std::vector<std::string>& exclude, int tokens) {
  // The MXMOE_* variables through the library's one parser (environment.hpp), and the arguments
  // through the edges' one override function, as the command and the C API do: an argument
  // left at its default takes the variable, one given wins. MXMOE_VERBOSE=dispatch turns the
  // dispatch log on for the judgement that follows.
  const EnvironmentConfig config = config_from_environment();
  apply_log_settings(config);
  RequestOverrides o;
  o.activation = activation;
  if (batch_invariant) o.batch_invariant = true;
  if (threads != 0) o.threads = threads;
  o.tokens_hint = tokens;
  o.forced_backend = backend;
  if (!exclude.empty()) o.excluded_backends = exclude;
  return apply_request_overrides(config.request, o, [](std::string_view field) {
    if (field == "forced_backend") return std::string("backend");
    if (field == "excluded_backends") return std::string("exclude");
    if (field == "tokens_hint") return std::string("tokens");
    return std::string(field);
  });
}

void register_errors(nb::module_& m) {
  ErrorTypes& types = error_types();
  types.no_backend = PyErr_NewExceptionWithDoc(
      "mxmoe.NoBackendError",
      "No backend supports the deployment. str(e) is the whole report (every backend with "
      "every reason, and the single changes that would make one fit); e.selection is the "
      "same report as a dict (the keys of mxmoe.explain()).",
      PyExc_Exception, nullptr);
  types.load = PyErr_NewExceptionWithDoc(
      "mxmoe.LoadError",
      "A checkpoint is missing, unreadable or malformed (an OSError): the message names the "
      "file, the tensor and the numbers.",
      PyExc_OSError, nullptr);
  types.numeric = PyErr_NewExceptionWithDoc(
      "mxmoe.NumericError",
      "A layer call's output holds NaN/Inf (a ValueError): a legal checkpoint can overflow "
      "float32 (an E8M0 scale of 254), so can routing weights near the float range. The "
      "message names the count and the tokens, as the C API (MXMOE_ERROR_NON_FINITE) and the "
      "command line (exit 1) do; `out`, when given, holds what was computed.",
      PyExc_ValueError, nullptr);
  types.unsupported_tokenizer = PyErr_NewExceptionWithDoc(
      "mxmoe.UnsupportedTokenizer",
      "A well-formed tokenizer.json using a model or stage mxmoe does not implement (a "
      "RuntimeError); the message names it (docs/TOKENIZERS.md lists what is supported).",
      PyExc_RuntimeError, nullptr);
  if (types.no_backend == nullptr || types.load == nullptr || types.numeric == nullptr ||
      types.unsupported_tokenizer == nullptr)
    throw nb::python_error();
  m.attr("NoBackendError") = nb::handle(types.no_backend);
  m.attr("LoadError") = nb::handle(types.load);
  m.attr("NumericError") = nb::handle(types.numeric);
  m.attr("UnsupportedTokenizer") = nb::handle(types.unsupported_tokenizer);
  main_thread_ident() = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  nb::register_exception_translator(translate);
}

}  // namespace mxmoe::python
