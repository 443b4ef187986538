#!/usr/bin/env bash
# Configures and builds mxmoe into a build directory.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
source "$root/scripts/ccache_launcher.sh" "$root"  # sets launcher
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
