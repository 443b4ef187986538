#!/usr/bin/env bash
# One command from a fresh clone to the main job: installs what is missing, builds,
# and runs one gpt-oss-20b MoE layer (embedded default weights) through the oracle's choice.
# Arguments are passed to `mxmoe run` (try --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" "$root/build"
exec "$root/build/mxmoe" run "$@"
