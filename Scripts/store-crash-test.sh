#!/usr/bin/env bash
# Crash test for GatehouseStore: starts a process doing heavy store writes, kill -9s it at a
# random moment, then checks `PRAGMA integrity_check` == ok and that every entry of the last
# batch the writer reported as committed reads back byte for byte. Repeats [runs] times
# (default 50) on the same file, so each run also exercises WAL recovery after a crash.
#
#   Scripts/store-crash-test.sh [runs]
#   GATEHOUSE_CRASH_WRITER=path/to/GatehouseStoreCrashWriter  skips the build
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-50}"

writer="${GATEHOUSE_CRASH_WRITER:-}"
if [ -z "$writer" ]; then
  nice -n 10 swift build --product GatehouseStoreCrashWriter >/dev/null
  writer="$(swift build --show-bin-path)/GatehouseStoreCrashWriter"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-crash.XXXXXX")"
trap 'rm -rf "$work"' EXIT
db="$work/store.sqlite"
passed=0
failed=0
commits=0

for run in $(seq 1 "$runs"); do
  "$writer" write "$db" "$run" >"$work/out" 2>&1 &
  pid=$!
  # Random moment between 50 and 1500 ms: sometimes before the first commit, mostly mid-batch.
  sleep "$(awk -v seed="$RANDOM$run" 'BEGIN { srand(seed); printf "%.3f", 0.05 + rand() * 1.45 }')"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true

  last="$( (grep '^committed ' "$work/out" || true) | tail -n 1 | cut -d' ' -f2)"
  last="${last:--1}"
  if result="$("$writer" verify "$db" "$run" "$last" 2>&1)"; then
    passed=$((passed + 1))
    if [ "$last" -ge 0 ]; then commits=$((commits + 1)); fi
    echo "run $run: $result"
  else
    failed=$((failed + 1))
    echo "run $run: $result" >&2
    cp "$db"* "${TMPDIR:-/tmp}/" 2>/dev/null || true
  fi
done

echo "store crash test: $runs kills, $passed passed, $failed failed ($commits killed after at least one commit)"
[ "$failed" -eq 0 ]
