#!/usr/bin/env bash
# End-to-end check of the regression gate on this (noisy) machine:
#   1. baseline at -O2, current at -O0  -> exit 1, naming the slowed kernels;
#   2. baseline and current at -O2      -> exit 0, five times in a row.
set -uo pipefail
SB=${SB:-sectorbench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scene=(-n 200 -m 20000 --repeat 10)

$SB run "${scene[@]}" --flags -O2 --json "$work/o2.json" > /dev/null || exit 2
$SB run "${scene[@]}" --flags -O0 --json "$work/o0.json" > /dev/null || exit 2
$SB regress --across-builds "$work/o2.json" "$work/o0.json" > "$work/slow.txt" 2>&1
status=$?
cat "$work/slow.txt" | tail -n 3
if [ "$status" -ne 1 ]; then
    echo "gate-selftest: FAILED: -O0 against an -O2 baseline exited $status, expected 1"; exit 1
fi
echo "gate-selftest: -O0 against -O2 exits 1 as it should"

for attempt in 1 2 3 4 5; do
    $SB run "${scene[@]}" --flags -O2 --baseline "$work/o2.json" > "$work/same.txt" 2>&1
    status=$?
    if [ "$status" -ne 0 ]; then
        tail -n 12 "$work/same.txt"
        echo "gate-selftest: FAILED: identical build raised an alarm on attempt $attempt (exit $status)"; exit 1
    fi
    echo "gate-selftest: identical build, attempt $attempt: exit 0"
done
echo "gate-selftest: passed"
