// This process's resident memory, for the per-rank memory of expert parallelism (mxmoe run
// under mpirun, tests/mpi) and the whole-model bench (its peak).
#pragma once

#include <cstdint>

namespace mxmoe::perf {

// Resident set size in bytes (/proc/self/statm); 0 where it cannot be read (not Linux).
std::uint64_t resident_bytes();

// The most this process has had resident since it started or since reset_peak_resident(), in
// bytes: /proc/self/status's VmHWM (mapped file pages that were resident count too), else
// getrusage's ru_maxrss (which no reset lowers); 0 where neither can be read.
std::uint64_t peak_resident_bytes();
// Lowers the peak to what is resident now (/proc/self/clear_refs, Linux 4.0 on), so that a
// buffer freed before (a bandwidth measurement's) is not counted; false where it cannot.
bool reset_peak_resident();

}  // namespace mxmoe::perf
