#!/usr/bin/env bash
# One command from a fresh clone to a passing test suite: installs what is missing,
# builds (warnings are errors) and runs every test with CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"
