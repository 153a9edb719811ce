#!/usr/bin/env bash
# A long fuzzing campaign: builds the harnesses as `make fuzz` does (make fuzz-build), then
# runs every harness of tests/fuzz/fuzz_*.c, one after the other, at `nice -n 19`, each for
# SECS seconds or until RUNS executions, with its dictionary, from a persistent working corpus
# in CORPUS_DIR/<harness>/ (it grows across runs and can be copied between machines) plus the
# committed seeds, and appends one line per harness to a summary file.
#
#   scripts/fuzz-campaign.sh CORPUS_DIR
#
# Environment: SECS (seconds per harness, default 3600), RUNS (executions per harness, default
# unlimited: whichever comes first ends the harness), ONLY (harness names separated by
# spaces, default all), FUZZ_BUILD (default build-fuzz), JOBS (build jobs, default 2),
# SUMMARY (default CORPUS_DIR/summary.tsv), FUZZ_CC (as for make fuzz), TIMEOUT (seconds of
# wall time one input may take before libFuzzer calls it a hang, default 60: the harnesses run
# at nice 19, and on a machine busy with other work an input that takes a third of a second
# of CPU time, such as a small compressed text that expands to a megabyte, can wait ten
# seconds for a core).
#
# Layout of CORPUS_DIR: <harness>/ the working corpus, artifacts/ the inputs of findings
# (<harness>-crash-<sha1>, -leak-, -timeout-, -oom-), logs/<harness>-<stamp>.log, summary.tsv.
# A summary line is tab-separated: UTC date, commit, CPU model, harness, executions, seconds,
# peak RSS (MB), result (clean, finding: <artifact>, failed: <exit status>, stopped).
#
# Stop it with `kill PID` (TERM or INT): the running harness is stopped by its own PID, its
# line is written with the result "stopped", and the lines of the harnesses that finished are
# kept. Exit status: 0 when every harness was clean, 1 when one found something or failed,
# 2 for a usage or build error, 143/130 when stopped.
set -euo pipefail

# With the kernel's autogroups (/proc/sys/kernel/sched_autogroup_enabled), nice ranks tasks only
# within one session: harnesses at nice 19 in a session of their own (setsid) still took half
# the CPU from a `make test` in another. A campaign that leads its own session lowers that
# session's group too (one started from a terminal's session leaves the terminal's alone).
if [ "$(ps -o sid= -p $$ | tr -d ' ')" = "$$" ] && [ -w /proc/self/autogroup ]; then
  echo 19 >/proc/self/autogroup 2>/dev/null || true
fi

usage() {
  echo "usage: [SECS=3600] [RUNS=N] [TIMEOUT=60] [ONLY='fuzz_a fuzz_b'] scripts/fuzz-campaign.sh CORPUS_DIR" >&2
  exit 2
}
[ $# -eq 1 ] || usage
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
secs=${SECS:-3600}
runs=${RUNS:-}
timeout=${TIMEOUT:-60}
build=${FUZZ_BUILD:-build-fuzz}
case $build in /*) ;; *) build="$root/$build" ;; esac
summary=${SUMMARY:-$out/summary.tsv}
case $secs in '' | *[!0-9]*) usage ;; esac
case $runs in *[!0-9]*) usage ;; esac
case $timeout in '' | *[!0-9]*) usage ;; esac

# the build runs in a process group of its own, so that a stop ends the compilers too
builder=
trap '[ -n "$builder" ] && kill -TERM -- "-$builder" 2>/dev/null; exit 143' TERM
trap '[ -n "$builder" ] && kill -TERM -- "-$builder" 2>/dev/null; exit 130' INT
setsid nice -n 19 make -C "$root" fuzz-build FUZZ_BUILD="$build" JOBS="${JOBS:-2}" \
  FUZZ_CC="${FUZZ_CC:-}" &
builder=$!
wait "$builder" || exit 2
builder=

harnesses=()
for src in "$root"/tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  harnesses+=("$name")
done
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "fuzz-campaign.sh: no harness to run (ONLY=${ONLY:-})" >&2
  exit 2
fi

commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git -C "$root" status --porcelain -- src tools include tests/fuzz 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -1)
cpu=${cpu:-$(uname -m)}
mkdir -p "$out/artifacts" "$out/logs"
[ -f "$summary" ] || printf 'date\tcommit\tcpu\tharness\texecutions\tseconds\tpeak_rss_mb\tresult\n' >"$summary"

child=
current=
log=
start=0

# One summary line for the harness that just ended (its log holds libFuzzer's final stats).
record() {
  local result=$1 execs rss
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$cpu" \
    "$current" "${execs:-0}" "$(($(date +%s) - start))" "${rss:-?}" "$result" >>"$summary"
  echo "$current: ${execs:-0} executions, $(($(date +%s) - start)) s, peak RSS ${rss:-?} MB: $result"
}

stop() {
  trap '' TERM INT
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
    record stopped
  fi
  exit "$1"
}
trap 'stop 143' TERM
trap 'stop 130' INT

status=0
for name in "${harnesses[@]}"; do
  bin="$build/fuzz/$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz-campaign.sh: $bin was not built" >&2
    exit 2
  fi
  current=$name
  mkdir -p "$out/$name"
  log="$out/logs/$name-$(date -u +%Y%m%dT%H%M%SZ).log"
  args=(-max_total_time="$secs" -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="$out/artifacts/$name-")
  [ -n "$runs" ] && args+=(-runs="$runs")
  [ -f "$root/tests/fuzz/dict/$name.dict" ] && args+=(-dict="$root/tests/fuzz/dict/$name.dict")
  args+=("$out/$name")
  [ -d "$root/tests/fuzz/corpus/$name" ] && args+=("$root/tests/fuzz/corpus/$name")
  start=$(date +%s)
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1" \
    nice -n 19 "$bin" "${args[@]}" >"$log" 2>&1 &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=
  if [ "$rc" -eq 0 ]; then
    record clean
  else
    status=1
    # the input libFuzzer wrote last for this harness (the finding ends the run, so it is
    # written after any slow-unit note); not the newest file of artifacts/, which another
    # campaign sharing DIR may have written
    art=$(sed -n 's/.*Test unit written to //p' "$log" | tail -1)
    if [ -n "$art" ] && [ -f "$art" ]; then
      record "finding: artifacts/$(basename "$art")"
    else
      record "failed: exit status $rc"
    fi
    echo "  log: $log" >&2
  fi
done
exit $status
