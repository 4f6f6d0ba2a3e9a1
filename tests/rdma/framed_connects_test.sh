#!/bin/bash
# 1000 framed connections against one blast-server, 10 at a time from 100 client processes, each
# sending 5 verified messages: every one must connect, exchange hellos and finish (zero failures).
# On iWARP the agent's hello answers the client's (a responder must not send first); siw holds about
# 70 queue pairs per process and frees a closed one only once its TCP connection is gone, hence
# 10 at a time; and under churn several at a time its rdma_create_qp fails now and then past some
# thousand connections in one process although everything was released (README, Known
# limitations; seen in 2 of 100 rounds here), so on siw a fresh blast-server takes each 250.
# EVRDMA_STRESS=light (the sanitizer and valgrind stages, which look for memory errors, not rare
# races) makes it 250, from 25 processes.
#   framed_connects_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT

rounds=100
[ "${EVRDMA_STRESS:-}" = light ] && rounds=25
per_server=$rounds
[ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && per_server=25
connections=$((rounds * 10))
failed_rounds=0
served_all=0
server_ok=true
for round in $(seq $rounds); do
    if [ $(((round - 1) % per_server)) = 0 ]; then
        "$build/demos/blast-server" -a "$address" -p 0 -v >"$log/server" 2>&1 &
        server=$!
        port=$(listening_port "$log/server" "$server")
        [ -n "$port" ] || { echo "FAILED: blast-server did not start"; cat "$log/server"; exit 1; }
    fi
    if ! "$build/demos/blast-client" -a "$address" -p "$port" -m send -n 10 -b 2 -s 64 -c 5 -v \
        >"$log/client" 2>&1; then
        failed_rounds=$((failed_rounds + 1))
        echo "FAILED: round $round: $(tail -n 1 "$log/client")"
        grep -v "^connection [0-9]*: send" "$log/client" | head -n 5
    fi
    if [ $((round % per_server)) = 0 ] || [ $round = $rounds ]; then
        kill -INT $server
        wait $server
        served=$(grep "^blast-server: served" "$log/server")
        echo "$served"
        expected=$(( (round - (round - 1) / per_server * per_server) * 10 ))
        if echo "$served" | grep -q "served $expected clients (0 failed, 0 left early), rejected 0"; then
            served_all=$((served_all + expected))
        else
            server_ok=false
            grep -i "error" "$log/server" | head -n 5
        fi
    fi
done
if [ "$failed_rounds" = 0 ] && $server_ok && [ $served_all = $connections ]; then
    echo "ok: $connections framed connections, 10 at a time, every one established and its data verified"
    exit 0
fi
echo "FAILED: $failed_rounds of $rounds rounds failed, $served_all of $connections served"
exit 1
