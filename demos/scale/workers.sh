#!/bin/bash
# workers.sh: echo throughput of one pingpong-server run with one worker thread and with two (-w 1,
# -w 2; the main thread only listens), in the same guest: P client processes of N connections do
# R round trips of 64 B each, all at once. Prints the round trips per second of all clients (from
# their start to the last one's end) for each, the server's CPU, and the ratio 2 workers / 1.
# Meant for tools/rdma-run (make scale); the test bed's guest has 2 vCPUs, shared by the clients.
#   workers.sh [client processes (2)] [connections each (32)] [round trips (2000)]
set -u
case ${1:-} in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
processes=${1:-2} per=${2:-32} trips=${3:-2000}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
wait_for() { for _ in $(seq 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
total=$((processes * per))

run() {  # run WORKERS: prints "rate cpu"
    local workers=$1
    "$build/demos/pingpong-server" -a "$ip" -p 7490 -x -w "$workers" -e "$total" >"$log/server$workers" 2>&1 &
    local server=$!
    wait_for "$log/server$workers" listening || { echo "workers: the server did not start" >&2; cat "$log/server$workers" >&2; return 1; }
    local started clients=() p failed=0
    started=$(date +%s.%N)
    for p in $(seq "$processes"); do
        "$build/demos/pingpong-client" -a "$ip" -p 7490 -n "$per" -c "$trips" -s 64 >"$log/client$workers.$p" 2>&1 &
        clients+=($!)
    done
    for pid in "${clients[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    local ended
    ended=$(date +%s.%N)
    wait $server
    [ "$failed" = 0 ] || { echo "workers: $failed client processes failed with -w $workers" >&2; cat "$log"/client"$workers".* >&2; return 1; }
    local cpu
    cpu=$(sed -n 's/^pingpong-server: cpu \(.*\)/\1/p' "$log/server$workers")
    awk -v n="$((total * trips))" -v a="$started" -v b="$ended" -v cpu="$cpu" 'BEGIN { printf "%.0f %s\n", n / (b - a), cpu }'
}

echo "echo throughput of one pingpong-server, $processes client processes x $per connections x $trips round trips of 64 B:"
read -r one cpu1 < <(run 1) || exit 1
echo "  1 worker:  $one round trips/s (server cpu ${cpu1})"
read -r two cpu2 < <(run 2) || exit 1
echo "  2 workers: $two round trips/s (server cpu ${cpu2})"
awk -v a="$one" -v b="$two" -v c="$(nproc)" 'BEGIN { printf "  ratio 2 workers / 1: %.2f (%d CPUs in this machine, shared with the clients)\n", b / a, c }'
