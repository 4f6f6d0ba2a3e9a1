#!/bin/bash
# worker_storm.sh: whether worker threads cost a connected client more during a connect storm than
# a server without them. Runs storm.sh (one pingpong-server, an observer client ping-ponging
# throughout, a storm of N connects) against a server without workers and one with 2 (-w 2), in
# turn, ROUNDS times each (each run waits for the device to have torn the last one's queue pairs
# down), and prints the observer's longest round trip during each storm side by side, with the
# medians and their ratio. A figure, never asserted. Meant for tools/rdma-run (make scale).
#   worker_storm.sh [connections (2000)] [rounds (3)] [workers (2)]
set -u
case ${1:-} in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(dirname "$0")
connections=${1:-2000} rounds=${2:-3} workers=${3:-2}
: "${EVRDMA_RDMA_IP:?run this under tools/rdma-run}"
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

longest() { sed -n 's/^  observer: longest round trip *\([0-9.]*\) ms during the storm.*/\1/p' "$1"; }
completed() { sed -n 's/^  storm: *\([0-9]*\) of \([0-9]*\) connections.*/\1/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "connect storms of $connections against pingpong-server without workers and with $workers (-w $workers), $rounds rounds in turn:"
printf "  %-6s %22s %22s\n" round "-w 0: longest (ms)" "-w $workers: longest (ms)"
for round in $(seq "$rounds"); do
    # Alternating which goes first, so neither always meets a device just out of a storm.
    if [ $((round % 2)) = 1 ]; then order="0 $workers"; else order="$workers 0"; fi
    for w in $order; do
        "$here/storm.sh" "$connections" -w "$w" >"$log/w$w.$round" 2>&1
    done
    printf "  %-6s %14s (%s ok) %14s (%s ok)\n" "$round" "$(longest "$log/w0.$round")" "$(completed "$log/w0.$round")" \
        "$(longest "$log/w$workers.$round")" "$(completed "$log/w$workers.$round")"
done
m0=$(for r in $(seq "$rounds"); do longest "$log/w0.$r"; done | median)
mw=$(for r in $(seq "$rounds"); do longest "$log/w$workers.$r"; done | median)
awk -v a="$m0" -v b="$mw" -v w="$workers" 'BEGIN {
    printf "  median longest round trip: -w 0 %.1f ms, -w %d %.1f ms: -w %d / -w 0 = %.2f\n", a, w, b, w, (a > 0 ? b / a : 0) }'
