// This process's resident memory, for the per-rank memory of expert parallelism (mxmoe run
// under mpirun, tests/mpi).
#pragma once

#include <cstdint>

namespace mxmoe::perf {

// Resident set size in bytes (/proc/self/statm); 0 where it cannot be read (not Linux).
std::uint64_t resident_bytes();

}  // namespace mxmoe::perf
