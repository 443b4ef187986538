#!/usr/bin/env bash
# One command from a fresh clone to the main job: installs what is missing, builds the mxmoe
# command alone (not the tests and benchmarks), writes a small whole gpt-oss model on random
# weights (once, into build/models/), and completes a prompt with it: tokenizer, attention with
# its KV cache, the MoE layers through the oracle's choice, the head and the sampler.
# Arguments are passed to `mxmoe complete` in place of the default prompt (try --help);
# MXMOE_RUN_MODEL=DIR runs another checkpoint (e.g. `mxmoe synth --preset gpt-oss-20b --full`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
source "$root/scripts/ccache_launcher.sh" "$root"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
  "${launcher[@]}" >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target mxmoe_cli
mxmoe=$root/build/mxmoe
model=${MXMOE_RUN_MODEL:-$root/build/models/gpt-oss-small}
if [ -z "${MXMOE_RUN_MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
  # gpt-oss-20b's structure (sinks, YaRN, alternating sliding windows, MXFP4 experts) at a
  # size that is written and run in seconds: 8 layers, 32 experts of H = I = 512.
  mkdir -p "$(dirname "$model")"
  "$mxmoe" synth --preset gpt-oss-20b --full --layers 8 --experts 32 --hidden 512 \
    --intermediate 512 --heads 8 --kv-heads 2 --head-dim 64 --vocab 4096 --out "$model" --force
fi
if [ $# -eq 0 ]; then
  set -- --prompt "The quick brown fox" --max-tokens 32 --verbose
fi
exec "$mxmoe" complete --model "$model" "$@"
