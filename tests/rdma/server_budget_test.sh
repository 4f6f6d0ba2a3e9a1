#!/bin/bash
# The demo servers' memory budget (-M) against clients that each ask for a lot within the limits:
# pingpong-server -M 64 with 10 clients of 4 MiB messages held open at once (each would pin
# 20 MiB: 5 x its data_size). Those within the budget complete, the rest are rejected with words
# that name the budget and how many such clients it holds, and the server serves on.
#   server_budget_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
fail() { echo "FAILED: $*"; exit 1; }
log=$(mktemp) out=$(mktemp)
trap 'kill $(jobs -p) 2>/dev/null; rm -f "$log" "$out"' EXIT
"$build/demos/pingpong-server" -a "$address" -p 0 -M 64 -e 11 >"$log" 2>&1 &
server=$!
port=$(listening_port "$log" "$server")
[ -n "$port" ] || fail "the server did not listen: $(cat "$log")"
hold_then_release "$out" timeout 120 "$build/demos/pingpong-client" -a "$address" -p "$port" -n 10 -c 3 -s 4194304 -k
sed 's/connection [0-9]*/connection N/' "$out" | sort | uniq -c | sort -rn | head -n 3
completed=$(sed -n 's/^pingpong-client: \([0-9]*\) of 10 connections completed.*/\1/p' "$out")
refused=$(grep -c 'rejected: server could not set up the connection: memory budget: ' "$out")
[ "${completed:-0}" -ge 1 ] || fail "no client within the budget was served"
[ "$refused" -ge 1 ] || fail "no client was refused for the budget"
[ $((completed + refused)) = 10 ] || fail "$completed completed + $refused refused for the budget is not 10"
grep -q 'the budget holds ~' "$out" || fail "the refusal does not say how many connections the budget holds"
# The server serves on: one more client, small.
timeout 60 "$build/demos/pingpong-client" -a "$address" -p "$port" -c 100 -s 64 >"$out" 2>&1 || fail "a small client after them failed: $(tail -n 2 "$out")"
timeout 30 tail --pid=$server -f /dev/null || fail "the server did not exit after 11 clients"
echo "ok: pingpong-server -M 64 served $completed of 10 clients asking for 4 MiB messages and refused $refused naming the budget, then a small one"
