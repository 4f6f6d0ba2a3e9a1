#!/bin/bash
# storm.sh: how long a connected client waits for its echoes while a storm of connects hits the same
# server. One pingpong-server; an observer client ping-pongs 64 B messages throughout; a second
# client process opens N connections at once (5 verified round trips each). Prints the observer's
# longest round trip during the storm, against the same observer on the quiet server just before,
# and the server's RSS before the storm, at its height and once its connections have closed, and the
# storm client's peak RSS (with GNU time installed).
# Meant for tools/rdma-run (make scale).
#   storm.sh [connections (1000)] [server options...]; STORM_SIZE: the storm's message size (64 B)
set -u
case ${1:-} in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
connections=${1:-1000}
shift || true
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
wait_for() { for _ in $(seq 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
ulimit -n 65536 2>/dev/null || true

"$build/demos/pingpong-server" -a "$ip" -p 7480 "$@" >"$log/server" 2>&1 &
server=$!
wait_for "$log/server" listening || { echo "storm: the server did not start"; cat "$log/server"; exit 1; }

# The observer: ping-pongs until SIGINT, then prints its longest round trip.
observe() {  # observe LOG SECONDS-OR-COMMAND...
    local out=$1; shift
    "$build/demos/pingpong-client" -a "$ip" -p 7480 -c 1000000000 -s 64 -v -x -R 0 >"$out" 2>&1 &
    local observer=$!
    sleep 1  # connected and ping-ponging
    local started=$(date +%s.%N)
    "$@"
    local status=$?
    local ended=$(date +%s.%N)
    kill -INT $observer; wait $observer
    echo "$status $(awk -v a="$started" -v b="$ended" 'BEGIN { print b - a }')"
}
longest() { sed -n 's/^connection 0: \([0-9]*\) round trips.*longest round trip \([0-9.]*\) ms$/\2 \1/p' "$1" | head -n 1; }

# The device's queue pairs (rdma res): the storm's must be gone before the next measurement starts,
# or that one meets the device still tearing them down (a storm of 10 000 measured 30 s after
# another: its observer waited 5 x as long, and 64 of its connects failed).
device_qps() { rdma res show 2>/dev/null | sed -n 's/.* qp \([0-9]*\) .*/\1/p' | awk '{ n += $1 } END { print n + 0 }'; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$server/status"; }
fds() { ls "/proc/$server/fd" | wc -l; }
qps_before=$(device_qps)
read -r _ quiet_seconds < <(observe "$log/quiet" sleep 3)
rss_before=$(rss) fds_before=$(fds) rss_peak=$rss_before
# The server's RSS at its height, sampled while the storm runs.
( while kill -0 $server 2>/dev/null; do rss; sleep 0.1; done ) >"$log/rss" 2>/dev/null &
sampler=$!
timed=""; [ -x /usr/bin/time ] && timed="/usr/bin/time -f %M -o '$log/client_peak'"
read -r storm_status storm_seconds < <(observe "$log/observer" sh -c \
    "exec $timed '$build/demos/pingpong-client' -a '$ip' -p 7480 -n '$connections' -c 5 -s '${STORM_SIZE:-64}' -v >'$log/storm' 2>&1")
# Every storm connection closed: the server is back to its descriptors of before (bounded wait).
for _ in $(seq 200); do [ "$(fds)" -le "$fds_before" ] && break; sleep 0.05; done
kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
rss_peak=$(sort -n "$log/rss" | tail -n 1)
rss_after=$(rss)
read -r quiet_ms quiet_trips < <(longest "$log/quiet")
read -r storm_ms storm_trips < <(longest "$log/observer")
kill -INT $server; wait $server
idle_started=$(date +%s.%N)
for _ in $(seq 1200); do [ "$(device_qps)" -le "$qps_before" ] && break; sleep 0.1; done
idle_seconds=$(awk -v a="$idle_started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
established=$(sed -n 's/^pingpong-client: \([0-9]*\) of \([0-9]*\) connections.*/\1/p' "$log/storm")

echo "connection storm: $connections connects at once (${STORM_SIZE:-64} B messages) against one pingpong-server ${*:+($*) }while one more client ping-pongs:"
printf "  storm:    %s of %s connections completed their verified round trips in %.2f s\n" "${established:-?}" "$connections" "$storm_seconds"
printf "  observer: longest round trip %8.3f ms during the storm (%s round trips)\n" "${storm_ms:-nan}" "${storm_trips:-?}"
printf "            longest round trip %8.3f ms on the quiet server (%s round trips in %.1f s)\n" "${quiet_ms:-nan}" "${quiet_trips:-?}" "$quiet_seconds"
printf "  server RSS: %s KiB before the storm, %s KiB at its height, %s KiB once its connections closed\n" "$rss_before" "${rss_peak:-?}" "$rss_after"
printf "  storm client's peak RSS: %s KiB (%s connections in one process)\n" "$(tail -n 1 "$log/client_peak" 2>/dev/null || echo '?')" "$connections"
grep -E "^pingpong-server: served" "$log/server" | sed 's/^/  /'
printf "  device: back to %s queue pairs %s s after the server ended\n" "$(device_qps)" "$idle_seconds"
[ "$storm_status" = 0 ] || { echo "  the storm's client failed:"; grep -v "^connection [0-9]*: [0-9]* round" "$log/storm" | head -n 5; }
