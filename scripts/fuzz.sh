#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, the whole library instrumented) into
# build-fuzz and runs each on its seed corpus (fuzz/corpus/<target>) with its dictionary
# (fuzz/dict/<target>.dict). New inputs go to a scratch corpus in build-fuzz, never into the
# repository. Exits non-zero if any target finds a crash, a leak, a sanitizer report, an
# out-of-memory or a timeout.
#   scripts/fuzz.sh [SECONDS]            all targets within SECONDS of fuzzing in total, split
#                                        evenly, at least 10 s each (default 60; CI uses this)
#   scripts/fuzz.sh --each SECONDS       each target for SECONDS
#   scripts/fuzz.sh --long [RUNS]        each target for RUNS executions (default 40000000)
#   scripts/fuzz.sh ... --only NAME      one target (config, npy, hardware, deployment, index,
#                                        safetensors, api, tokenizer, tokenizer_text, chat)
#   scripts/fuzz.sh ... --no-build       run the targets already built (FUZZ_BUILD_DIR, default
#                                        build-fuzz), e.g. a copy kept for a long campaign
# One process per target, one after the other (one core). The summary (executions, coverage,
# features, corpus size, wall time per target) is printed and kept in build-fuzz/summary.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
build_first=1
targets="config npy hardware deployment index safetensors api tokenizer tokenizer_text chat"
mode=time
budget=60
while [ $# -gt 0 ]; do
  case "$1" in
    --long) mode=runs; budget=40000000
            if [ $# -gt 1 ] && [[ "$2" =~ ^[0-9]+$ ]]; then budget=$2; shift; fi ;;
    --only) targets=$2; shift ;;
    --no-build) build_first=0 ;;
    --each) mode=each; budget=$2; shift ;;
    [0-9]*) budget=$1 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Warnings are errors in the GCC build (CI); here clang reports them without stopping
# (-DMXMOE_WERROR=OFF; -Wno-unknown-warning-option for pragmas that name GCC-only warnings).
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer -g -Wno-unknown-warning-option"
if [ "$build_first" = 1 ]; then
source "$root/scripts/ccache_launcher.sh" "$root"  # sets launcher
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DCMAKE_CXX_COMPILER=clang++ -DMXMOE_FUZZ=ON -DMXMOE_WERROR=OFF -DMXMOE_BUILD_TESTS=OFF -DMXMOE_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" --target $(printf 'fuzz_%s ' $targets) -j "$(nproc)"
fi

count=$(echo $targets | wc -w)
case $mode in
  runs) limit="-runs=$budget" ;;
  each) limit="-max_total_time=$budget" ;;
  *) each=$(( budget / count )); [ "$each" -ge 10 ] || each=10; limit="-max_total_time=$each" ;;
esac
summary=$build/summary.txt
: >"$summary"
status=0
for target in $targets; do
  work=$build/corpus_$target
  mkdir -p "$work" "$build/artifacts_$target"
  rm -f "$build/artifacts_$target"/*
  log=$build/fuzz_$target.log
  echo "== fuzz_$target ($limit)"
  start=$(date +%s)
  rc=0
  # Inputs up to 4x the largest seed kind: binary images need room for data, JSON does not.
  case $target in safetensors|index) max_len=65536 ;; deployment) max_len=16384 ;; *) max_len=8192 ;; esac
  "$build/fuzz/fuzz_$target" "$work" "$root/fuzz/corpus/$target" -dict="$root/fuzz/dict/$target.dict" \
      $limit -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts_$target/" 2>"$log" || rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)  # none when a seed crashes
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  corp=$(echo "$last" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*' || true)
  crashes=$(ls "$build/artifacts_$target" | wc -l)
  line="fuzz_$target: execs=${execs:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?} seconds=$secs artifacts=$crashes rc=$rc"
  echo "$line" | tee -a "$summary"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    echo "fuzz_$target FAILED (log: $log, artifacts: $build/artifacts_$target):"
    tail -40 "$log"
    status=1
  fi
done
echo "summary: $summary"
exit $status
