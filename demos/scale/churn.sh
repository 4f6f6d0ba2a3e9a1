#!/bin/bash
# churn.sh: connection churn against one pingpong-server: N connect / 1 verified round trip /
# disconnect cycles (from M connections of one client process at once, each reconnecting as soon
# as it closed). The server's open fds, RSS, pinned memory and the device's resource counts (`rdma res`)
# are taken after a warm-up and again after the churn, each time with no client left: they must
# return to the idle counts (exit 1 otherwise). Meant for tools/rdma-run (make scale).
#   churn.sh [cycles (10000)] [at once (8)] [tolerated: a failure text allowed in up to 1% of cycles]
set -u
case ${1:-} in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
cycles=${1:-10000} parallel=${2:-8} tolerated=${3:-}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run} dev=${EVRDMA_RDMA_DEV:?}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
wait_for() { for _ in $(seq 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

"$build/demos/pingpong-server" -a "$ip" -p 7481 >"$log/server" 2>&1 &
server=$!
wait_for "$log/server" listening || { echo "churn: the server did not start"; cat "$log/server"; exit 1; }

# What the server holds, and what the device holds (both sides' counts: no client is running).
snapshot() {
    local fds rss pinned res
    fds=$(ls /proc/$server/fd | wc -l)
    rss=$(awk '/^VmRSS/ { print $2 }' /proc/$server/status)
    pinned=$(awk '/^VmPin/ { print $2 }' /proc/$server/status)
    res=$(rdma res show 2>/dev/null | grep " $dev:" | sed 's/^[0-9]*: [^:]*: //')
    echo "$fds|$rss|$pinned|$res"
}
churn() {  # churn CYCLES: $parallel connections, each reconnecting until CYCLES in all
    local per=$(( ($1 + parallel - 1) / parallel ))
    "$build/demos/pingpong-client" -a "$ip" -p 7481 -n "$parallel" -r "$per" -c 1 -s 64 -v -R 10000 >"$log/client" 2>&1
    local status=$?
    tail -n 1 "$log/client"
    return $status
}
# The server's agents finish their teardown (disconnect, flush, release): wait until the device's
# counts have not changed for a second (at most 20 s), and say how long that took.
settle() {
    local last="" now same=0 waited=0
    while [ $same -lt 10 ] && [ $waited -lt 200 ]; do
        now=$(rdma res show 2>/dev/null | grep " $dev:")
        if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0; last=$now; fi
        sleep 0.1; waited=$((waited + 1))
    done
    echo $(( (waited - same) * 100 ))
}

# Cycles that failed (after churn returned non-zero): 0 when every failure is the tolerated one
# and they are at most 1% of CYCLES (then says so), 1 otherwise (then says what failed).
judge() {  # judge CYCLES
    local count others
    grep "^connection [0-9]*: [a-z]" "$log/client" | sed 's/^connection [0-9]*: //' >"$log/failures"
    count=$(wc -l <"$log/failures")
    others=$(if [ -n "$tolerated" ]; then grep -vc -- "$tolerated" "$log/failures"; else echo "$count"; fi)
    if [ -n "$tolerated" ] && [ "$others" = 0 ] && [ "$count" -gt 0 ] && [ $((count * 100)) -le "$1" ]; then
        echo "  $count cycle(s) failed with the tolerated '$tolerated' (a known problem, see the caller):"
        sed 's/^/    /' "$log/failures" | head -n 3
        return 0
    fi
    echo "  FAIL: not every cycle completed:"; sort "$log/failures" | uniq -c | sort -rn | head -n 5
    return 1
}

warmup=$(churn 200) || judge 200 >"$log/warmup" || { echo "churn: the warm-up failed: $warmup"; cat "$log/warmup"; exit 1; }
[ -s "$log/warmup" ] && { echo "churn: the warm-up:"; cat "$log/warmup"; }
settle0=$(settle)
IFS='|' read -r fds0 rss0 pin0 res0 < <(snapshot)
started=$(date +%s.%N)
summary=$(churn "$cycles"); status=$?
ended=$(date +%s.%N)
settle1=$(settle)
IFS='|' read -r fds1 rss1 pin1 res1 < <(snapshot)
kill -INT $server; wait $server
per=$(( (cycles + parallel - 1) / parallel ))

per=$(( (cycles + parallel - 1) / parallel ))
echo "connection churn: $(( per * parallel )) connect / verified round trip / disconnect cycles against one pingpong-server on $dev:"
echo "  client: ${summary#pingpong-client: }"
awk -v a="$started" -v b="$ended" -v n=$(( per * parallel )) -v p="$parallel" 'BEGIN { printf "  %.2f s: %.0f cycles/s, %.2f ms per cycle (%d at a time)\n", b - a, n / (b - a), (b - a) * 1000 * p / n, p }'
printf "  server, idle after the warm-up:  %4s fds, RSS %6s KiB, pinned %5s KiB; device: %s (settled in %s ms)\n" "$fds0" "$rss0" "$pin0" "$res0" "$settle0"
printf "  server, idle after the churn:    %4s fds, RSS %6s KiB, pinned %5s KiB; device: %s (settled in %s ms)\n" "$fds1" "$rss1" "$pin1" "$res1" "$settle1"
failed=0
if [ "$status" != 0 ]; then
    judge $(( per * parallel )) || failed=1
fi
[ "$fds0" = "$fds1" ] || { echo "  FAIL: the server's fds did not return to the idle count"; failed=1; }
[ "$pin0" = "$pin1" ] || { echo "  FAIL: the server's pinned memory did not return to the idle amount"; failed=1; }
[ "$res0" = "$res1" ] || { echo "  FAIL: the device's resources did not return to the idle counts"; failed=1; }
[ "$failed" = 0 ] && echo "  fds, pinned memory and device resources returned to the idle counts; RSS grew by $(( rss1 - rss0 )) KiB"
exit $failed
