#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz and runs each on its
# seed corpus (fuzz/corpus/<target>) for SECONDS (default 60). New inputs go to a scratch
# corpus in build-fuzz, never into the repository. Exits non-zero if any target finds a crash.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=$root/build-fuzz

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DMXMOE_FUZZ=ON -DMXMOE_BUILD_TESTS=OFF -DMXMOE_BUILD_BENCH=OFF \
  >/dev/null
cmake --build "$build" --target fuzz_safetensors fuzz_index -j "$(nproc)"

status=0
for target in safetensors index; do
  work=$build/corpus_$target
  mkdir -p "$work" "$build/artifacts_$target"
  echo "== fuzz_$target for ${seconds}s"
  if ! "$build/fuzz/fuzz_$target" "$work" "$root/fuzz/corpus/$target" \
      -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/artifacts_$target/" -print_final_stats=1 2>"$build/fuzz_$target.log"; then
    echo "fuzz_$target FOUND A CRASH (log: $build/fuzz_$target.log):"
    tail -40 "$build/fuzz_$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "$build/fuzz_$target.log" | tail -2 || true
  fi
done
exit $status
