#!/usr/bin/env bash
# The second architecture: cross-compiles mxmoe for 64-bit Arm with Debian's cross toolchain
# (the x86 backends are not compiled there, the oracle reports them not_compiled; the Arm
# backends neon_int16, neon_fp32, neon_dotprod_int8, neon_i8mm_int8 and sve_int8 are) and runs under qemu-user the core test suite,
# then the Arm backends' conformance and invariance suites at each emulated feature level. Used by CI; needs root or sudo
# the first time (it enables the arm64 multiarch and installs the cross packages).
#   scripts/cross-aarch64.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
# libc6:arm64 and libstdc++6:arm64 are the runtime the tests run with (see the toolchain file).
# libpcre2-dev:arm64 and libicu-dev:arm64: the tokenizer's regex engine and normalizer, linked by
# the library (docs/DEPENDENCIES.md).
packages=(g++-aarch64-linux-gnu qemu-user libc6:arm64 libstdc++6:arm64 libfmt-dev:arm64 libgtest-dev:arm64
          libgmock-dev:arm64 libpcre2-dev:arm64 libicu-dev:arm64)
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
  test_hw test_io test_produce test_routing test_oracle test_layout test_capi test_cli test_conformance \
  test_invariance test_dense
file "$build/mxmoe" | grep -q "ARM aarch64"
# The oracle on an Arm machine: the NEON backends, every x86 one refused as not compiled.
qemu-aarch64 -L / "$build/mxmoe" explain | tail -2
# A layer runs on them without --allow-reference: bf16 (the default), f32 and int8 (qemu's
# default CPU has every extension: smmla).
qemu-aarch64 -L / "$build/mxmoe" run --preset tiny --tokens 4 | grep "^chosen: neon_int16"
qemu-aarch64 -L / "$build/mxmoe" run --preset tiny --tokens 4 --activation f32 |
  grep "^chosen: neon_fp32"
qemu-aarch64 -L / "$build/mxmoe" run --preset tiny --tokens 4 --activation int8 |
  grep "^chosen: neon_i8mm_int8"
QEMU_CPU=neoverse-n1 qemu-aarch64 -L / "$build/mxmoe" run --preset tiny --tokens 4 \
  --activation int8 | grep "^chosen: neon_dotprod_int8"
# The core rooms: codecs, model, hardware, io (checkpoints against float64 through the reference
# backend), routing, oracle, layering, C API and CLI. The numerics-heavy suites (layer families,
# conformance, invariance, perf) run natively on x86 only: under qemu their float64 loops
# would take most of the CI budget and test no Arm-specific code (there is none).
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" \
  -L "^(format|model|hw|io|produce|routing|oracle|layout|capi|cli)$"

# The Arm backends at each feature level qemu emulates: cortex-a57 (Armv8.0, Advanced SIMD
# only: neon_int16 and neon_fp32 run, the int8 backends are refused for asimddp), neoverse-n1
# (Armv8.2 with the dot product: neon_dotprod_int8 too) and max (every extension: I8MM's
# neon_i8mm_int8 and sve_int8 too, SVE at 512 bits). At each: the conformance suite (every
# runnable backend against the reference and the float64 evaluator), the recorded bits of
# the numerics classes (the same digests as the x86 backends'), and the invariance suite of
# the backends' claims. Under emulation a test costs ~30x its native time, so the
# large-shape and V4 conformance runs stay on x86; the paths (tails, tiles, empty experts,
# both GLUs, the router) are the same ones.
arm_suites() {  # QEMU_CPU, then the invariance claims to run
  echo "cross-aarch64: the Arm backends under QEMU_CPU=$1"
  QEMU_CPU=$1 qemu-aarch64 -L / "$build/mxmoe" info --hardware | grep -E "^(ISA usable|SVE):"
  QEMU_CPU=$1 qemu-aarch64 -L / "$build/tests/test_conformance" --gtest_brief=1 \
    --gtest_filter='Conformance.EveryBackendMatchesTheReference:Conformance.RouterPathMatchesTheReference:NumericsClass.*'
  QEMU_CPU=$1 qemu-aarch64 -L / "$build/tests/test_invariance" --gtest_brief=1 \
    --gtest_filter="$2"
}
for cpu in cortex-a57 neoverse-n1 max; do
  arm_suites "$cpu" 'Claims/Suite.*neon*:Claims/Suite.*sve*:Claims.*'
  # The whole model's dense kernels (neon_fp32; neon_dotprod_int8 where the CPU has the dot
  # product): the portable bits of their classes, batch invariance, the float64 bounds.
  QEMU_CPU=$cpu qemu-aarch64 -L / "$build/tests/test_dense" --gtest_brief=1
done
# The vector-length agnostic SVE kernel at 128, 256 and 2048 bits besides max's 512: the same
# recorded bits and its invariance claims at each.
for bytes in 16 32 256; do
  QEMU_CPU=max,sve-default-vector-length=$bytes qemu-aarch64 -L / "$build/mxmoe" info --hardware |
    grep -x "SVE:        $((8 * bytes))-bit vectors"
  arm_suites "max,sve-default-vector-length=$bytes" 'Claims/Suite.*sve*'
done
