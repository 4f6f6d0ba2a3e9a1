#!/bin/bash
# The main demo, meant to run where an RDMA device exists (make demo runs it under tools/rdma-run):
# a persistent pingpong server, then N concurrent clients from one client process, each making
# verified round trips; both print their figures (-x), the server per agent and in all.
#   demo.sh [clients (16)] [count (500)] [size (4096)]
set -u
case ${1:-} in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
server=$build/demos/pingpong-server client=$build/demos/pingpong-client
clients=${1:-16} count=${2:-500} size=${3:-4096}
address=${EVRDMA_RDMA_IP:?"no RDMA device address: run this under tools/rdma-run"}
log=$(mktemp)
"$server" -a "$address" -x -e "$clients" >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do grep -q listening "$log" && break; sleep 0.05; done   # wait until it listens
grep -q listening "$log" || { echo "demo: the server did not start:"; cat "$log"; exit 1; }
echo "== pingpong: $clients clients x $count round trips of $size B against one server on ${EVRDMA_RDMA_DEV:-?} ($address)"
echo "== client side"
"$client" -a "$address" -n "$clients" -c "$count" -s "$size" -v -x
client_status=$?
wait "$server_pid"
server_status=$?
echo "== server side"
cat "$log"
rm -f "$log"
[ "$client_status" = 0 ] && [ "$server_status" = 0 ]
