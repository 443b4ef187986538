// What a test needs of the platform it runs on, said once for every test room: the x86
// kernel families (absent from the aarch64 cross build), and real time (absent under the
// emulator that build's tests run in). A test that cannot hold elsewhere is skipped there,
// saying why; it never passes vacuously.
#pragma once

#include <gtest/gtest.h>

#include <string>

// For a test about what the x86 backends are chosen for or compute: on another architecture
// (scripts/cross-aarch64.sh) they are not compiled, the oracle says not_compiled, and only the
// judge (`reference`, never chosen unasked) remains; the test is skipped there, saying so.
#if defined(__x86_64__)
inline constexpr bool kX86BackendsCompiled = true;
#define MXMOE_REQUIRE_X86_BACKENDS() (void)0
#else
inline constexpr bool kX86BackendsCompiled = false;
#define MXMOE_REQUIRE_X86_BACKENDS() \
  GTEST_SKIP() << "needs the x86 backends, which are not compiled for this architecture"
#endif

// For a test that measures the machine (resident memory, a peak rate): under AddressSanitizer
// the measured code carries shadow memory, redzones, a quarantine of freed blocks and checked
// loads, so it measures the sanitizer; the test skips there, saying so, and runs in the normal
// build.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

// For a test that depends on timing (a signal sent mid-way): under the emulator of a cross
// build every step is tens of times slower, and the test is skipped there, saying so.
#define MXMOE_SKIP_UNDER_EMULATOR()                                  \
  if (std::string(MXMOE_CLI_COMMAND) != std::string(MXMOE_CLI_PATH)) \
  GTEST_SKIP() << "timing-dependent: not run under the emulator (" MXMOE_CLI_COMMAND ")"
