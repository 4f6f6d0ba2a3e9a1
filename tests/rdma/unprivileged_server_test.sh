#!/bin/bash
# A server run as a user would run it (not root, so no CAP_IPC_LOCK, and Debian's default
# RLIMIT_MEMLOCK of 8 MiB): past the limit, connections are refused with words that say so (the
# limit, what is pinned, how many connections it holds) instead of a bare "Cannot allocate memory",
# the connections within it work, and the server serves on.
#   unprivileged_server_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
fail() { echo "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root to become nobody (the test bed runs as root)"
log=$(mktemp) out=$(mktemp)
chmod 666 "$log"
# 60 clients of 64 KiB messages (soft-iWARP allows about 70 connections per process): the server pins
# 320 KiB per connection (2 x 64 KiB receive ring and a spare it echoes from, 2 x 64 KiB send
# buffers, as pingpong asks), so 8 MiB holds 25 of them.
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
    sh -c "ulimit -l 8192 && exec '$build/demos/pingpong-server' -a '$address' -p 0 -e 60 -t" >"$log" 2>&1 &
server=$!
port=$(listening_port "$log" "$server")
[ -n "$port" ] || fail "the unprivileged server did not listen: $(cat "$log")"
# -k: every connection stays open until all 60 have had their answer, so the server holds them at
# once (the server answers a few requests per loop turn: early ones could otherwise finish first).
hold_then_release "$out" timeout 120 "$build/demos/pingpong-client" -a "$address" -p "$port" -n 60 -c 1 -s 65536 -k
timeout 30 tail --pid=$server -f /dev/null || { kill $server; fail "the server did not exit after 60 clients: $(tail -n 3 "$log"); the clients: $(grep -v ' completed' "$out" | sed 's/connection [0-9]*/connection N/' | sort | uniq -c | head -n 5)"; }
sed 's/connection [0-9]*/connection N/' "$out" | sort | uniq -c | sort -rn | head -n 4
grep -m1 'error' "$log"
completed=$(sed -n 's/^pingpong-client: \([0-9]*\) of 60 connections completed.*/\1/p' "$out")
refused=$(grep -c 'rejected: server could not set up the connection: RLIMIT_MEMLOCK reached (' "$out")
grep -q '^pingpong-server: served 60 clients' "$log" || fail "the server did not serve every client: $(tail -n 1 "$log")"
[ "${completed:-0}" -ge 1 ] || fail "no connection within the limit worked"
[ $((completed + refused)) = 60 ] || fail "$completed completed + $refused refused for RLIMIT_MEMLOCK is not 60"
grep -q 'a connection pins 320 KiB: the limit holds ~25' "$out" || fail "the refusal does not say how many connections the limit holds"
grep -q 'raise ulimit -l' "$log" || fail "the server's own error does not say what to do"
rm -f "$log" "$out"
echo "ok: an unprivileged server with RLIMIT_MEMLOCK 8 MiB served $completed of 60 clients and refused $refused, naming the limit"
