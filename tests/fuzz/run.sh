#!/usr/bin/env bash
# Runs every fuzzer built in BUILD/fuzz for SECONDS each (libFuzzer's -max_total_time),
# starting from the committed seed corpus tests/fuzz/corpus/<fuzzer>/ (read only) plus a
# working corpus BUILD/fuzz-corpus/<fuzzer>/ that keeps growing between runs, with the
# dictionary tests/fuzz/dict/<fuzzer>.dict when there is one.
#   tests/fuzz/run.sh BUILD SECONDS [extra libFuzzer flags...]
# Exit status: non-zero when a fuzzer finds a crash, UB, a leak, a timeout or an
# out-of-memory; its log is printed and the reproducer is saved as
# BUILD/fuzz-artifacts/<kind>-<sha1> (see tests/fuzz/README.md to replay it).
set -euo pipefail
build=${1:?usage: run.sh BUILD SECONDS [flags...]}
secs=${2:?usage: run.sh BUILD SECONDS [flags...]}
shift 2
src=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
fuzzers=("$build"/fuzz/fuzz_*)
if [ ${#fuzzers[@]} -eq 0 ]; then
  echo "run.sh: no fuzzers in $build/fuzz (build with -DEMB_FUZZ=ON)" >&2
  exit 2
fi
mkdir -p "$build/fuzz-artifacts"
status=0
for f in "${fuzzers[@]}"; do
  name=$(basename "$f")
  work="$build/fuzz-corpus/$name"
  seeds="$src/corpus/$name"
  mkdir -p "$work"
  log="$build/fuzz-artifacts/$name.log"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$build/fuzz-artifacts/")
  [ -f "$src/dict/$name.dict" ] && args+=(-dict="$src/dict/$name.dict")
  args+=("$@" "$work")
  [ -d "$seeds" ] && args+=("$seeds")
  # -fno-sanitize-recover: the first UB report aborts; leaks are checked after each input.
  if ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1" \
      "$f" "${args[@]}" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "$name: clean, ${runs:-?} executions in ${secs} s (log: $log)"
  else
    status=1
    echo "$name: FAILED (log: $log); last lines:" >&2
    grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)|^\s+NEW_FUNC' "$log" | tail -60 >&2
  fi
done
exit $status
