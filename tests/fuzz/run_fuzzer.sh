#!/bin/bash
# Runs one libFuzzer target for a bounded time from its seed corpus; fails on any crash, sanitizer
# report or failed check, keeping the input that caused it in the artifacts directory.
#   run_fuzzer.sh <fuzzer> <seed corpus dir> <seconds> <artifacts dir>
# EVRDMA_FUZZ_SECONDS overrides <seconds>; EVRDMA_FUZZ_CORPUS names a directory where the corpus
# grows from run to run (one subdirectory per target; default: a temporary one). The seed corpus
# in the repository is only read.
set -u -o pipefail
fuzzer=$1 seeds=$2 seconds=${EVRDMA_FUZZ_SECONDS:-$3} artifacts=$4
name=$(basename "$fuzzer")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$work/corpus
[ -n "${EVRDMA_FUZZ_CORPUS:-}" ] && corpus=$EVRDMA_FUZZ_CORPUS/$name
mkdir -p "$corpus" "$artifacts"
# New inputs go to the first directory only. -timeout: an input that takes 10 s is a hang.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name-" "$corpus" "$seeds" >"$work/log" 2>&1
status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
inputs=$(find "$corpus" "$seeds" -type f | wc -l)
if [ "$status" = 0 ]; then
    echo "fuzz: $name: ${runs:-?} inputs run in $seconds s, no crash, no sanitizer report, every check held ($inputs in the corpus)"
    exit 0
fi
echo "fuzz: $name FAILED (status $status) after ${runs:-?} inputs:"
grep -E "check failed|ERROR|SUMMARY|==[0-9]+==|runtime error|Test unit written|deadly signal|#[0-9]+ 0x" "$work/log" | head -n 40
exit 1
