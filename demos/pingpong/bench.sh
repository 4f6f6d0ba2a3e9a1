#!/bin/bash
# bench.sh: round-trip latency of evrdma's pingpong against perftest's ib_send_lat, both over
# rdma_cm, in the same run on the same device: event mode against `ib_send_lat -e` (both sleep on
# the completion channel), adaptive polling (-P) against `ib_send_lat` busy-polling; then the CPU
# both pingpong processes use while their connections are open and idle, with adaptive polling.
# Prints each figure and the ratios. Meant for tools/rdma-run (make bench).
#   bench.sh [iterations (5000)] [size (64)] [polling window in us (100)] [idle seconds (10)]
set -u
case ${1:-} in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
iterations=${1:-5000} size=${2:-64} window=${3:-100} idle=${4:-10}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run} dev=${EVRDMA_RDMA_DEV:?}
log=$(mktemp -d)
wait_for() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# perftest's half round trips, typical (median) and average, in microseconds: $1 = "-e" or "".
perftest() {
    timeout 120 ib_send_lat -d "$dev" -R $1 -s "$size" -n "$iterations" >"$log/perf-server" 2>&1 &
    wait_for "$log/perf-server" "Waiting for client" || sleep 1
    timeout 120 ib_send_lat -d "$dev" -R $1 -s "$size" -n "$iterations" "$ip" >"$log/perf-client" 2>&1
    wait
    awk '/t_typical/ { getline; print $5, $6 }' "$log/perf-client"
}
# evrdma's pingpong: us per round trip; "$@" adds options to both sides.
pingpong() {
    "$build/demos/pingpong-server" -a "$ip" -e 1 "$@" >"$log/ours-server" 2>&1 &
    wait_for "$log/ours-server" listening
    "$build/demos/pingpong-client" -a "$ip" -c "$iterations" -s "$size" -x "$@" >"$log/ours-client" 2>&1
    wait
    sed -n 's/.*, \([0-9.]*\) us per round trip, .*/\1/p' "$log/ours-client" | head -n 1
}
# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

read -r perf_e_typical perf_e_avg < <(perftest -e)
read -r perf_p_typical perf_p_avg < <(perftest "")
ours_event=$(pingpong)
ours_poll=$(pingpong -P "$window")

echo "round-trip latency, $size B messages, $iterations iterations, on $dev:"
if [ -n "${perf_e_avg:-}" ] && [ -n "${perf_p_avg:-}" ] && [ -n "$ours_event" ] && [ -n "$ours_poll" ]; then
    awk -v ev="$ours_event" -v po="$ours_poll" -v peavg="$perf_e_avg" -v petyp="$perf_e_typical" \
        -v ppavg="$perf_p_avg" -v pptyp="$perf_p_typical" -v w="$window" 'BEGIN {
        printf "  waiting on completion events:\n"
        printf "    ib_send_lat -e (perftest):   %8.1f us per round trip (average; typical %.1f)\n", 2 * peavg, 2 * petyp
        printf "    evrdma pingpong:             %8.1f us per round trip (average)\n", ev
        printf "    ratio evrdma / perftest:     %8.2f\n", ev / (2 * peavg)
        printf "  polling:\n"
        printf "    ib_send_lat (busy-polling):  %8.1f us per round trip (average; typical %.1f)\n", 2 * ppavg, 2 * pptyp
        printf "    evrdma pingpong -P %-6d    %8.1f us per round trip (average)\n", w, po
        printf "    ratio evrdma / perftest:     %8.2f\n", po / (2 * ppavg) }'
else
    echo "  a measurement failed:"; tail -n 5 "$log"/*
    rm -rf "$log"; exit 1
fi

# Idle: both sides keep their connection open with nothing to send, polling window as above.
"$build/demos/pingpong-server" -a "$ip" -P "$window" >"$log/idle-server" 2>&1 &
server=$!
wait_for "$log/idle-server" listening
"$build/demos/pingpong-client" -a "$ip" -c 100 -s "$size" -k -P "$window" >"$log/idle-client" 2>&1 &
client=$!
wait_for "$log/idle-client" "holding them open"
sleep 0.5  # past the last window
hz=$(getconf CLK_TCK)
s0=$(cpu_ticks $server) c0=$(cpu_ticks $client)
sleep "$idle"
s1=$(cpu_ticks $server) c1=$(cpu_ticks $client)
kill -INT $client; wait $client
kill -INT $server; wait $server
awk -v s=$((s1 - s0)) -v c=$((c1 - c0)) -v hz="$hz" -v t="$idle" -v w="$window" 'BEGIN {
    printf "  idle, connection open, -P %d: server %.2f %% of a core, client %.2f %% (over %d s)\n", w, 100 * s / hz / t, 100 * c / hz / t, t }'
grep -E "cpu|RNR" "$log/ours-client" | sed 's/^/  /'
rm -rf "$log"
