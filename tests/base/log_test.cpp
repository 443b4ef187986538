// The library's log sink (include/mxmoe/log.hpp): categories filter, set returns the previous
// sink, and concurrent logging while the sink is swapped delivers every message whole, one at
// a time (the callback below is not thread-safe on purpose: the sink serialises it).
#include "mxmoe/log.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace mxmoe {
namespace {

struct Collected {
  std::vector<std::string> messages;
  int inside = 0;  // callbacks running now: must never exceed 1
  bool overlapped = false;
};

void collect(LogCategory, const char* message, void* user) {
  auto* c = static_cast<Collected*>(user);
  if (++c->inside > 1) c->overlapped = true;
  c->messages.emplace_back(message);
  --c->inside;
}

TEST(LogSink, CategoriesFilterAndSetReturnsThePrevious) {
  Collected c;
  const LogSink previous =
      set_log_sink({&collect, &c, static_cast<unsigned>(LogCategory::warning)});
  EXPECT_TRUE(log_enabled(LogCategory::warning));
  EXPECT_FALSE(log_enabled(LogCategory::dispatch));
  log_message(LogCategory::dispatch, "dropped\n");
  log_message(LogCategory::warning, "kept\n");
  const LogSink mine = set_log_sink(previous);
  EXPECT_EQ(mine.user_data, &c);
  EXPECT_EQ(c.messages, std::vector<std::string>{"kept\n"});
  // The default: stderr, warnings only.
  EXPECT_EQ(default_log_sink().callback, &log_to_stderr);
  EXPECT_EQ(default_log_sink().categories, static_cast<unsigned>(LogCategory::warning));
}

TEST(LogSink, ConcurrentMessagesAreDeliveredWholeOneAtATime) {
  Collected a, b;
  const unsigned all =
      static_cast<unsigned>(LogCategory::warning) | static_cast<unsigned>(LogCategory::dispatch);
  const LogSink previous = set_log_sink({&collect, &a, all});
  constexpr int kThreads = 4, kMessages = 2000;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      while (!go) {
      }
      const std::string text = "thread " + std::to_string(t) + " line\n";
      for (int i = 0; i < kMessages; ++i) log_message(LogCategory::dispatch, text.c_str());
    });
  std::thread swapper([&] {
    while (!go) {
    }
    for (int i = 0; i < 500; ++i) set_log_sink({&collect, i % 2 ? &a : &b, all});
    set_log_sink({&collect, &a, all});
  });
  go = true;
  for (auto& t : threads) t.join();
  swapper.join();
  set_log_sink(previous);
  EXPECT_FALSE(a.overlapped || b.overlapped);
  EXPECT_EQ(a.messages.size() + b.messages.size(), std::size_t{kThreads * kMessages});
  for (const auto* c : {&a, &b})
    for (const std::string& m : c->messages) {
      ASSERT_EQ(m.rfind("thread ", 0), 0u) << m;
      ASSERT_EQ(m.substr(m.size() - 6), " line\n") << m;
    }
}

}  // namespace
}  // namespace mxmoe
