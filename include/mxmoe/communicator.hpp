// Communicator: how the ranks of an expert-parallel group exchange bytes. The core library
// holds the interface and an in-process implementation (ranks are threads: tests, demos);
// MPI lives in the optional mxmoe_mpi component (in the source tree, not installed), so libmxmoe
// never links MPI.
//
// Every call is collective and bounded: it returns, or throws CommError naming the ranks that
// did not answer within CommOptions::deadline_s, failed, or sent something that does not match
// what this rank expects. A communicator that threw is broken: every later call throws.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

class MXMOE_API CommError : public std::runtime_error {
 public:
  CommError(std::vector<int> ranks, const std::string& message)
      : std::runtime_error(message), ranks_(std::move(ranks)) {}
  // The ranks at fault (those that did not answer, failed, or sent a malformed message).
  const std::vector<int>& ranks() const noexcept { return ranks_; }

 private:
  std::vector<int> ranks_;
};

struct CommOptions {
  // How long one collective call waits for the other ranks before it throws CommError.
  double deadline_s = 30;
};

// One message of an exchange: bytes to or from `peer` (this rank itself included).
struct SendBuffer {
  int peer = 0;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
};
struct RecvBuffer {
  int peer = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
};

class MXMOE_API Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual const CommOptions& options() const noexcept = 0;

  // Collective: every rank calls it, each with the messages it sends and receives in this
  // round (possibly none). The messages from rank s to rank r are matched in the order both
  // list them, and each receive must name exactly the size sent: the receiver knows it (an
  // exchange of counts comes first). Returns when all of this rank's messages are done.
  // Throws CommError naming the peers that did not answer within the deadline, failed, or
  // sent a message of another size.
  virtual void exchange(std::span<const SendBuffer> sends, std::span<const RecvBuffer> recvs) = 0;
};

// Collectives over exchange() (src/dist/collectives.cpp).
// Every rank gives `bytes` bytes (the same count on every rank); out [size * bytes] gets rank
// r's at r * bytes.
MXMOE_API void allgather(Communicator& comm, const void* in, std::size_t bytes, void* out);
// Every rank gives a string of any length; the result holds rank r's at index r.
MXMOE_API std::vector<std::string> allgather_strings(Communicator& comm, std::string_view mine);
// Blocks until every rank calls it (bounded like every call).
MXMOE_API void barrier(Communicator& comm);

// An in-process group: n communicators whose ranks are threads of this process (rank r is
// group[r]); each must be driven by its own thread. For tests and for expert parallelism
// inside one process. Throws std::invalid_argument unless n >= 1 and the deadline is > 0.
MXMOE_API std::vector<std::unique_ptr<Communicator>> make_thread_group(int n,
                                                                       CommOptions options = {});

}  // namespace mxmoe
