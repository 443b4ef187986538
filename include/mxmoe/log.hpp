// The library's log: where mxmoe reports what a host may want to see but need not act on (the
// dispatch log of MXMOE_VERBOSE=dispatch, warnings such as more threads than CPUs). One sink
// per process, the only mutable global of the library: a callback the host can set (default:
// stderr) and the categories it receives. Setting and logging are thread-safe; messages are
// delivered one at a time (the callback is never entered by two threads at once and must not
// call set_log_sink itself). The hot path (forward) never logs.
#pragma once

#include "mxmoe/export.h"

namespace mxmoe {

enum class LogCategory : unsigned {
  warning = 1u << 0,   // a setting mxmoe accepted but the host may not want (on by default)
  dispatch = 1u << 1,  // one line per candidate backend each time the oracle judges
};

// MESSAGE is one or more whole lines, each ending in '\n'.
using LogCallback = void (*)(LogCategory category, const char* message, void* user_data);

struct MXMOE_API LogSink {
  LogCallback callback = nullptr;  // nullptr: messages are dropped
  void* user_data = nullptr;
  unsigned categories = 0;  // bitwise OR of LogCategory values delivered
};

// Writes MESSAGE to stderr (the default callback), its control bytes but line breaks escaped.
MXMOE_API void log_to_stderr(LogCategory category, const char* message, void* user_data);
// The default sink: log_to_stderr, warnings only.
MXMOE_API LogSink default_log_sink() noexcept;

// Installs SINK and returns the previous one (restore it when done, as with a signal handler).
MXMOE_API LogSink set_log_sink(LogSink sink) noexcept;
MXMOE_API LogSink log_sink() noexcept;

// Whether CATEGORY is delivered now (lets a caller skip formatting a message nobody reads).
MXMOE_API bool log_enabled(LogCategory category) noexcept;
// Delivers MESSAGE to the sink when CATEGORY is enabled.
MXMOE_API void log_message(LogCategory category, const char* message) noexcept;

}  // namespace mxmoe
