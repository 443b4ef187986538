// A bound on a blocking step mxmoe cannot poll: MPI_Init waits inside MPI for every rank of
// the job, MPI_Finalize for every rank to finish, and neither takes a deadline. A Watchdog
// armed around such a step ends the process if the step outlasts its deadline, with one line
// on stderr and a known exit code, so that a rank that never started turns into an error at
// --ep-deadline instead of a hang (docs/DISTRIBUTED.md, "Bounded failure").
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mxmoe::cli {

class Watchdog {
 public:
  // Past SECONDS without disarm() (or destruction), writes the line MESSAGE() returns to
  // stderr and ends the process with _exit(CODE). MESSAGE runs on the watchdog's own thread,
  // not in a signal handler, so it may allocate and read files; it must not call into what
  // the watched step holds (MPI). Ending the process then takes no lock and runs no exit
  // handler (write(2), _exit(2)): the blocked step's thread is never re-entered.
  Watchdog(double seconds, std::function<std::string()> message, int code);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The step ended in time: the thread ends without firing.
  void disarm() noexcept;

 private:
  void watch(std::chrono::steady_clock::time_point deadline);

  std::function<std::string()> message_;
  int code_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace mxmoe::cli
