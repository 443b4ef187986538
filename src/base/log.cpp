// The one log sink of the process (include/mxmoe/log.hpp), guarded by one mutex.
#include "mxmoe/log.hpp"

#include <cstdio>
#include <mutex>
#include <string>

#include "base/printable.hpp"

namespace mxmoe {

namespace {

struct Sink {
  std::mutex mutex;
  LogSink sink = default_log_sink();
};

Sink& the_sink() noexcept {
  static Sink sink;  // constructed on first use, thread-safe
  return sink;
}

}  // namespace

// A layer's name (a directory's) can be in the message: escaped as the CLI's output is. Out
// of memory for the escaped copy, the message is dropped (a sink must not throw).
void log_to_stderr(LogCategory, const char* message, void*) {
  std::string text;
  try {
    text = printable_message(message);
  } catch (...) {
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

LogSink default_log_sink() noexcept {
  return {&log_to_stderr, nullptr, static_cast<unsigned>(LogCategory::warning)};
}

LogSink set_log_sink(LogSink sink) noexcept {
  Sink& s = the_sink();
  const std::lock_guard lock(s.mutex);
  const LogSink previous = s.sink;
  s.sink = sink;
  return previous;
}

LogSink log_sink() noexcept {
  Sink& s = the_sink();
  const std::lock_guard lock(s.mutex);
  return s.sink;
}

bool log_enabled(LogCategory category) noexcept {
  const LogSink sink = log_sink();
  return sink.callback != nullptr && (sink.categories & static_cast<unsigned>(category)) != 0;
}

void log_message(LogCategory category, const char* message) noexcept {
  Sink& s = the_sink();
  const std::lock_guard lock(s.mutex);  // one message at a time, never torn
  if (s.sink.callback == nullptr || (s.sink.categories & static_cast<unsigned>(category)) == 0)
    return;
  s.sink.callback(category, message, s.sink.user_data);
}

}  // namespace mxmoe
