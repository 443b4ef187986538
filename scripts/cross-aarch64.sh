#!/usr/bin/env bash
# The portable build, checked on a second architecture: cross-compiles mxmoe for 64-bit Arm
# with Debian's cross toolchain (x86 backends are not compiled there; the oracle reports them
# not_compiled) and runs the core test suite under qemu-user. Used by CI; needs root or sudo
# the first time (it enables the arm64 multiarch and installs the cross packages).
#   scripts/cross-aarch64.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
# libc6:arm64 and libstdc++6:arm64 are the runtime the tests run with (see the toolchain file).
packages=(g++-aarch64-linux-gnu qemu-user libc6:arm64 libstdc++6:arm64 libfmt-dev:arm64 libgtest-dev:arm64
          libgmock-dev:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cross-aarch64: installing ${missing[*]}"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo_cmd[@]}" dpkg --add-architecture arm64
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

source "$root/scripts/ccache_launcher.sh" "$root"  # sets launcher
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DMXMOE_BUILD_BENCH=OFF >/dev/null
# Only what the core rooms' tests run (the CLI, the C example, their test programs).
cmake --build "$build" -j "$(nproc)" --target mxmoe_cli example_c_moe_layer test_format test_model \
  test_hw test_io test_routing test_oracle test_layout test_capi test_cli
file "$build/mxmoe" | grep -q "ARM aarch64"
# The oracle on an Arm machine: no x86 kernel is compiled, so only `reference` can run.
qemu-aarch64 -L / "$build/mxmoe" explain --activation f32 --backend reference | tail -3
# The core rooms: codecs, model, hardware, io (checkpoints against float64 through the reference
# backend), routing, oracle, layering, C API and CLI. The numerics-heavy suites (layer families,
# conformance, invariance, perf) run natively on x86 only: under qemu their float64 loops
# would take most of the CI budget and test no Arm-specific code (there is none).
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" \
  -L "^(format|model|hw|io|routing|oracle|layout|capi|cli)$"
