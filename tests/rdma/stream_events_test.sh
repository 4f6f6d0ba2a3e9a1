#!/bin/bash
# A stream's events reach a libevent program as over a socket, over real RDMA (run under
# tools/rdma-run), seen through kv-client against kv-server:
#   - a read timeout (bufferevent_set_timeouts) ends in BEV_EVENT_TIMEOUT, over RDMA as over TCP;
#   - a peer killed with SIGKILL ends the stream in an error event (the reason printed);
#   - a peer stopped with SIGSTOP, with keepalive on, ends it in an error event with ETIMEDOUT;
#   - among three clients of one server, one killed and one stopped: the server ends the killed
#     one's stream with an error event and serves the third meanwhile; the stopped one, continued,
#     is served again.
# Each wait is for the client to end (a bound of 60 s only catches a hang).
#   stream_events_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
demos=$build/demos

# start_server <name>: a kv-server on both transports; sets tcp_port and rdma_port, and pid in $server.
start_server() {
    "$demos/kv-server" "$address" >"$log/server-$1" 2>&1 &
    server=$!
    listening_port "$log/server-$1" "$server" >/dev/null
    tcp_port=$(sed -n 's/.* tcp port \([0-9]*\)$/\1/p' "$log/server-$1")
    rdma_port=$(sed -n 's/.* rdma port \([0-9]*\)$/\1/p' "$log/server-$1")
}

# start_client <name> <kv-client options...>: a kv-client whose standard input stays open (a FIFO
# this script holds) and whose output goes to $log/<name>; its pid in $client, its input on fd 3.
start_client() {
    local name=$1
    shift
    rm -f "$log/$name.in"
    mkfifo "$log/$name.in"
    exec 3<>"$log/$name.in"
    "$demos/kv-client" "$@" <"$log/$name.in" >"$log/$name" 2>&1 &
    client=$!
}

# ends_within <pid> <seconds>: waits for the process to end; its exit status, or 124 if it did not.
ends_within() {
    local _
    for _ in $(seq $(($2 * 20))); do
        kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }
        sleep 0.05
    done
    return 124
}

# answered <name> [<line>]: waits (up to 60 s) until the client printed <line> (OK: the stream is up
# and served).
answered() {
    local _
    for _ in $(seq 1200); do
        grep -qx "${2:-OK}" "$log/$1" && return 0
        sleep 0.05
    done
    return 1
}

start_server quiet
for transport in tcp rdma; do
    port=$tcp_port; [ $transport = rdma ] && port=$rdma_port
    start_client timeout-$transport --$transport "$address" "$port" --read-timeout 1
    ends_within "$client" 60
    status=$?
    check "a read timeout over $transport ends in BEV_EVENT_TIMEOUT: $(cat "$log/timeout-$transport")" \
        $([ $status = 1 ] && grep -q "no reply within the read timeout" "$log/timeout-$transport"; echo $?)
    exec 3>&-
done
kill "$server"
wait "$server" 2>/dev/null

start_server killed
start_client killed --rdma "$address" "$rdma_port"
echo "SET a b" >&3
answered killed
check "the client is served before its server is killed" $?
kill -KILL "$server"
wait "$server" 2>/dev/null
ends_within "$client" 60
status=$?
check "a killed server ends the RDMA stream in an error event: $(cat "$log/killed" | tr '\n' '|')" \
    $([ $status = 1 ] && grep -q "kv-client: over rdma: Connection reset by peer" "$log/killed"; echo $?)
exec 3>&-

start_server stopped
start_client stopped --rdma "$address" "$rdma_port" --keepalive 300
echo "SET a b" >&3
answered stopped
check "the client is served before its server is stopped" $?
kill -STOP "$server"
at_exit "kill -CONT $server 2>/dev/null"
ends_within "$client" 60
status=$?
check "a stopped server, with keepalive, ends the RDMA stream with ETIMEDOUT: $(cat "$log/stopped" | tr '\n' '|')" \
    $([ $status = 1 ] && grep -q "kv-client: over rdma: Connection timed out" "$log/stopped"; echo $?)
exec 3>&-
kill -CONT "$server"
kill -INT "$server"
wait "$server"
check "the stopped server, continued, ends on SIGINT with exit 0" $?
# Three clients of one server; their inputs are FIFOs this script holds on fds 4, 5 and 6.
start_server several
clients=()
for i in 4 5 6; do
    rm -f "$log/several-$i.in"
    mkfifo "$log/several-$i.in"
    eval "exec $i<>\"\$log/several-$i.in\""
    "$demos/kv-client" --rdma "$address" "$rdma_port" <"$log/several-$i.in" >"$log/several-$i" 2>&1 &
    clients+=($!)
    echo "SET key$i value$i" >&$i
    answered several-$i
    check "client $i of three is served" $?
done
kill -STOP "${clients[1]}"
at_exit "kill -CONT ${clients[1]} 2>/dev/null"
kill -KILL "${clients[2]}"
wait "${clients[2]}" 2>/dev/null
for _ in $(seq 1200); do
    grep -q "a connection failed: Connection reset by peer" "$log/server-several" && break
    sleep 0.05
done
check "the server ends the killed client's stream with an error event: $(tr '\n' '|' <"$log/server-several")" \
    $(grep -q "kv-server: a connection failed: Connection reset by peer" "$log/server-several"; echo $?)
echo "GET key6" >&4
echo "COUNT" >&4
answered several-4 "COUNT 3"
status=$?  # (taken before the check's own $(...) sets $?)
check "the third client is served while one is stopped and one was killed: $(tr '\n' '|' <"$log/several-4")" $status
kill -CONT "${clients[1]}"
echo "GET key4" >&5
answered several-5 "VALUE value4"
status=$?  # (taken before the check's own $(...) sets $?)
check "the stopped client, continued, is served again: $(tr '\n' '|' <"$log/several-5")" $status
for i in 4 5; do
    echo "QUIT" >&$i
done
ends_within "${clients[0]}" 60
check "the third client quits with exit 0" $?
ends_within "${clients[1]}" 60
check "the continued client quits with exit 0" $?
exec 4>&- 5>&- 6>&-
kill -INT "$server"
wait "$server"
check "the server of three ends on SIGINT with exit 0" $?
check "it served three RDMA connections: $(tail -n 1 "$log/server-several")" \
    $(grep -q "served 3 connections (0 tcp, 3 rdma)" "$log/server-several"; echo $?)
echo "$failures failed"
[ "$failures" = 0 ]
