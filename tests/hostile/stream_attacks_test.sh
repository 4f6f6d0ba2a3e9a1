#!/bin/bash
# kv-server's byte streams against a raw verbs peer (hostile-stream-peer) that speaks the stream's
# protocol badly, over real RDMA (run under tools/rdma-run), while a well-behaved kv-client is
# served alongside, run after run (each sets 100 keys and reads them back, every reply checked):
#   1. silent connections: a few that complete the RDMA handshake and never say the stream's
#      hello are closed by the server (ListenerOptions::helloTimeout), the good client served
#      meanwhile;
#   2. a flood of them: 1000 (siw: 50, it holds about 70 QPs per process) held until closed; the
#      memory of streams not yet established is bounded, and once requests wait for it the
#      stream silent longest is closed to make room: every good run is served throughout (before,
#      0 of 401 replies in 5 of 5 runs), and every silent one is closed;
#   3. a peer that never reads: a hello granting 7 credits, 15 messages of 10 000 GETs, then no
#      credit ever: the server answers what the credits allow and, once the peer has taken
#      nothing for kv-server's --send-timeout (3 s here), ends that stream with ETIMEDOUT
#      (ConnectionOptions::creditTimeout; before, it was held as long as the peer liked);
#   4. a request for a region with remote read and write: a stream server lends nothing, and
#      refuses it with EACCES (before: granted, 16 KiB with remote write, up to the budget).
# The sanitizer and valgrind stages (EVRDMA_STRESS=light) look for memory errors, not volume: a
# flood of 200 there (still past the memory bound: requests wait and silent streams are evicted).
# Each wait is for the attacker to end (once the server closed all it held; bounded at 120 and
# 300 s, which only catches a hang); the times it prints are figures, not proofs.
#   stream_attacks_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
attacker=$build/tests/hostile-stream-peer
siw=0; [ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && siw=1

"$build/demos/kv-server" "$address" --rdma 0 --send-timeout 3 >"$log/server" 2>&1 &
server=$!
listening_port "$log/server" $server >/dev/null
port=$(sed -n 's/.* rdma port \([0-9]*\)$/\1/p' "$log/server")
[ -n "$port" ] || { echo "FAILED: kv-server did not start"; cat "$log/server"; exit 1; }
run_alongside kv "$build/demos/kv-client" --rdma "$address" "$port" --check 100 --timeout 15 &

# 1. A few silent connections.
"$attacker" -a "$address" -p "$port" -n 5 -w 120000 no-hello >"$log/few" 2>&1
status=$?
outcome=$(tail -n 1 "$log/few")
[ $status = 0 ] && grep -q "^no-hello: 5 established, 5 closed by the server" <<<"$outcome"
check "5 connections that never said hello were closed by the server: $outcome" $?

# 2. A flood of them.
count=1000; [ "${EVRDMA_STRESS:-}" = light ] && count=200; [ "$siw" = 1 ] && count=50
"$attacker" -a "$address" -p "$port" -n $count -w 300000 no-hello >"$log/flood" 2>&1
status=$?
outcome=$(tail -n 1 "$log/flood")
[ $status = 0 ] && grep -q "^no-hello: $count established, $count closed by the server" <<<"$outcome"
check "$count silent connections were each accepted, then closed: $outcome" $?
# 3. A peer that never reads its answers.
"$attacker" -a "$address" -p "$port" -w 120000 never-reads >"$log/never" 2>&1
status=$?
outcome=$(tail -n 1 "$log/never")
[ $status = 0 ] && grep -q "^never-reads: closed by the server after" <<<"$outcome" &&
    grep -q "kv-server: a connection failed: Connection timed out" "$log/server"
check "a peer that never reads was closed once it took nothing for the send timeout: $outcome" $?

# 4. A region request.
"$attacker" -a "$address" -p "$port" -w 30000 region-request >"$log/region" 2>&1
status=$?
outcome=$(tail -n 1 "$log/region")
[ $status = 0 ] && [ "$outcome" = "region-request: refused: Permission denied" ]
check "a stream server lends no memory: $outcome" $?

check_alongside kv
kill -INT $server
wait $server
status=$?  # (taken before the check's own $(...) sets $?)
check "kv-server ended on SIGINT: $(tail -n 1 "$log/server")" $status
[ "$failures" = 0 ]
