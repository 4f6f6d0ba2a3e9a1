#!/bin/bash
# echo_tail.sh: how long an echo waits when one server's loop carries many connections: one
# embedded-server (-d 32), one echo-client process of 64 connections that begin together (-b),
# 64-byte messages, first 1 and then 16 in flight per connection, three runs each. Prints each
# run's mean and longest wait for an echo and how many waited over 100 ms (echo-client's figures).
# Meant for tools/rdma-run (make scale). Figures only: nothing here is asserted.
#   echo_tail.sh [runs (3)] [connections (64)]
set -u
case ${1:-} in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
runs=${1:-3} connections=${2:-64}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
"$build/demos/embedded-server" -a "$ip" -p 7476 -H 0 -d 32 -m 4096 >"$log/server" 2>&1 &
server=$!
for _ in $(seq 400); do grep -q "^rdma " "$log/server" && break; sleep 0.05; done
grep -q "^rdma " "$log/server" || { echo "echo_tail: the server did not start" >&2; cat "$log/server" >&2; exit 1; }
status=0
for window in 1 16; do
    messages=$((window == 1 ? 2000 : 4000))
    echo "$connections connections x $window in flight x $messages messages of 64 B each:"
    for run in $(seq "$runs"); do
        "$build/demos/echo-client" -a "$ip" -p 7476 -c "$connections" -b -w "$window" -d 32 -n "$messages" -s 64 \
            >"$log/client" 2>&1 || status=1
        sed -n 's/.*"mean_ms": \([0-9.]*\), "longest_ms": \([0-9.]*\), "over_100ms": \([0-9]*\).*/  mean \1 ms, longest \2 ms, over 100 ms: \3/p' "$log/client"
        grep -q '"verified": '"$((connections * messages))" "$log/client" || { echo "echo_tail: a run did not verify every echo" >&2; cat "$log/client" >&2; status=1; }
    done
done
kill -INT $server
wait $server || status=1
exit $status
