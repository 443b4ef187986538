// allgather, allgather_strings and barrier on top of Communicator::exchange.
#include <fmt/core.h>

#include <cstdint>
#include <cstring>

#include "mxmoe/communicator.hpp"

namespace mxmoe {

void allgather(Communicator& comm, const void* in, std::size_t bytes, void* out) {
  const int n = comm.size();
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  for (int r = 0; r < n; ++r) {
    sends.push_back({r, static_cast<const std::byte*>(in), bytes});
    recvs.push_back({r, static_cast<std::byte*>(out) + static_cast<std::size_t>(r) * bytes, bytes});
  }
  comm.exchange(sends, recvs);
}

std::vector<std::string> allgather_strings(Communicator& comm, std::string_view mine) {
  const int n = comm.size();
  const std::uint64_t size = mine.size();
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(n));
  allgather(comm, &size, sizeof size, sizes.data());
  constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 30;  // a selection report is ~10 kB
  for (int r = 0; r < n; ++r)
    if (sizes[static_cast<std::size_t>(r)] > kMaxBytes)
      throw CommError({r},
                      fmt::format("rank {}: rank {} announced a string of {} bytes (more than "
                                  "{}): a malformed message",
                                  comm.rank(), r, sizes[static_cast<std::size_t>(r)], kMaxBytes));
  std::vector<std::string> out(static_cast<std::size_t>(n));
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  for (int r = 0; r < n; ++r) {
    std::string& s = out[static_cast<std::size_t>(r)];
    s.resize(sizes[static_cast<std::size_t>(r)]);
    sends.push_back({r, reinterpret_cast<const std::byte*>(mine.data()), mine.size()});
    recvs.push_back({r, reinterpret_cast<std::byte*>(s.data()), s.size()});
  }
  comm.exchange(sends, recvs);
  return out;
}

void barrier(Communicator& comm) {
  const std::uint8_t mark = 1;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(comm.size()));
  allgather(comm, &mark, 1, all.data());
}

}  // namespace mxmoe
