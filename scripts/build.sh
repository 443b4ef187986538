#!/usr/bin/env bash
# Configures and builds mxmoe into a build directory.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
# ccache (when installed: scripts/deps.sh brings it) reuses objects compiled before, also
# from another clone: paths are made relative to the repository root (CCACHE_BASEDIR) and the
# working directory is left out of the hash, so a fresh clone in another folder hits the
# objects a session compiled.
launcher=()
if command -v ccache >/dev/null 2>&1 && [ "${MXMOE_NO_CCACHE:-0}" != 1 ]; then
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
