#!/bin/bash
# 1000 framed connections against one blast-server, 10 at a time from 100 client processes, each
# sending 5 verified messages: every one must connect, exchange hellos and finish (zero failures).
# On iWARP the agent's hello answers the client's (a responder must not send first); siw holds about
# 70 queue pairs per process and frees a closed one only once its TCP connection is gone, hence
# 10 at a time; and under churn several at a time its rdma_create_qp and ibv_create_cq fail now and
# then (ENOMEM) although everything was released (docs/limitations.md): a fresh server per
# 250 did not cure it after the whole suite had run in the same guest (4 of 100 rounds, one server
# after 140 connections), so on siw a round that fails with those words in the server's log runs
# again on a fresh server (at most 10 times, each said; the rounds before it must all be served).
# EVRDMA_STRESS=light (the sanitizer and valgrind stages, which look for memory errors, not rare
# races) makes it 250, from 25 processes.
#   framed_connects_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"

rounds=100
[ "${EVRDMA_STRESS:-}" = light ] && rounds=25
per_server=$rounds
[ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && per_server=25
connections=$((rounds * 10))
# What the server says when siw itself runs out (docs/limitations.md): a round that fails
# with these words in the server's log is run again on a fresh server, at most siw_retries times
# in all, and said so; any other failure, or one more than that, fails the test.
siw_limit='rdma_create_qp: soft-iWARP \(siw\) holds|ibv_create_cq.*(Cannot allocate memory|Resource temporarily unavailable)'
siw_retries=10
retried=0
failed_rounds=0
served_all=0
server_ok=true
server=""
server_rounds=0  # rounds this server has served in full
stop_server() {  # stop_server <check: yes|no>: SIGINT, and its served count checked against its rounds
    kill -INT $server
    wait $server
    served=$(grep "^blast-server: served" "$log/server")
    echo "$served"
    if [ "$1" = no ]; then
        # siw ran out in its last round: the rounds before it must all have been served.
        local count
        count=$(echo "$served" | sed -n 's/^blast-server: served \([0-9]*\) clients.*/\1/p')
        [ -n "$count" ] && [ "$count" -ge $((server_rounds * 10)) ] && served_all=$((served_all + server_rounds * 10)) || server_ok=false
    elif echo "$served" | grep -q "served $((server_rounds * 10)) clients (0 failed, 0 left early), rejected 0"; then
        served_all=$((served_all + server_rounds * 10))
    else
        server_ok=false
        grep -i "error" "$log/server" | head -n 5
    fi
    server=""
    server_rounds=0
}
round=1
while [ $round -le $rounds ]; do
    if [ -z "$server" ]; then
        "$build/demos/blast-server" -a "$address" -p 0 -v >"$log/server" 2>&1 &
        server=$!
        port=$(listening_port "$log/server" "$server")
        [ -n "$port" ] || { echo "FAILED: blast-server did not start"; cat "$log/server"; exit 1; }
    fi
    if "$build/demos/blast-client" -a "$address" -p "$port" -m send -n 10 -b 2 -s 64 -c 5 -v \
        >"$log/client" 2>&1; then
        server_rounds=$((server_rounds + 1))
    elif [ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && [ $retried -lt $siw_retries ] && grep -Eq "$siw_limit" "$log/server"; then
        retried=$((retried + 1))
        echo "round $round: siw ran out in the server ($(grep -Eo "$siw_limit" "$log/server" | head -n 1)): run again on a fresh server ($retried of at most $siw_retries)"
        stop_server no
        continue
    else
        failed_rounds=$((failed_rounds + 1))
        echo "FAILED: round $round: $(tail -n 1 "$log/client")"
        grep -v "^connection [0-9]*: send" "$log/client" | head -n 5
    fi
    if [ $((round % per_server)) = 0 ] || [ $round = $rounds ]; then stop_server yes; fi
    round=$((round + 1))
done
[ -n "$server" ] && stop_server yes
if [ "$failed_rounds" = 0 ] && $server_ok && [ $served_all = $connections ]; then
    echo "ok: $connections framed connections, 10 at a time, every one established and its data verified ($retried rounds run again after siw ran out)"
    exit 0
fi
echo "FAILED: $failed_rounds of $rounds rounds failed, $served_all of $connections served"
exit 1
