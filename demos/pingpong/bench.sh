#!/bin/bash
# bench.sh: event-driven round-trip latency of evrdma's pingpong against perftest's ib_send_lat in
# event mode (-e: it also sleeps on the completion channel), both over rdma_cm, in the same run on
# the same device. Prints each figure and the ratio. Meant for tools/rdma-run (make bench).
#   bench.sh [iterations (5000)] [size (64)]
set -u
case ${1:-} in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
iterations=${1:-5000} size=${2:-64}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run} dev=${EVRDMA_RDMA_DEV:?}
log=$(mktemp -d)
wait_for() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

timeout 120 ib_send_lat -d "$dev" -R -e -s "$size" -n "$iterations" >"$log/perf-server" 2>&1 &
wait_for "$log/perf-server" "Waiting for client" || sleep 1
timeout 120 ib_send_lat -d "$dev" -R -e -s "$size" -n "$iterations" "$ip" >"$log/perf-client" 2>&1
wait
# perftest reports half a round trip; its typical (median) and average, in microseconds.
read -r perf_typical perf_avg < <(awk '/t_typical/ { getline; print $5, $6 }' "$log/perf-client")

"$build/demos/pingpong-server" -a "$ip" -e 1 >"$log/ours-server" 2>&1 &
wait_for "$log/ours-server" listening
"$build/demos/pingpong-client" -a "$ip" -c "$iterations" -s "$size" -x >"$log/ours-client" 2>&1
wait
ours_rtt=$(sed -n 's/.*, \([0-9.]*\) us per round trip, .*/\1/p' "$log/ours-client" | head -n 1)

echo "round-trip latency, $size B messages, $iterations iterations, on $dev, both waiting on completion events:"
if [ -n "${perf_avg:-}" ] && [ -n "$ours_rtt" ]; then
    awk -v ours="$ours_rtt" -v pavg="$perf_avg" -v ptyp="$perf_typical" 'BEGIN {
        printf "  ib_send_lat -e (perftest): %8.1f us per round trip (average; typical %.1f)\n", 2 * pavg, 2 * ptyp
        printf "  evrdma pingpong:           %8.1f us per round trip (average)\n", ours
        printf "  ratio evrdma / perftest:   %8.2f\n", ours / (2 * pavg) }'
else
    echo "  a measurement failed:"; tail -n 5 "$log"/*
    rm -rf "$log"; exit 1
fi
grep -E "cpu|RNR" "$log/ours-client" | sed 's/^/  /'
rm -rf "$log"
