#!/bin/bash
# Clients whose first message fails their agent at once, again and again, against one
# blast-server: each must be closed by the server with its reason, and the next one answered.
# On RoCE such a message can arrive before the agent's CM has the client's RTU; the agent then
# disconnects once the CM's ESTABLISHED event comes (the RTU). Disconnecting before it raced the
# CM's own work: Linux's CM left its REP outstanding, and rdma_destroy_id blocked the server's loop
# for about a minute (the next client got "no answer to the connect request"). A round in which
# that race can happen is rare (about 1 in 100 attacks here), hence the count. iWARP has no RTU (its kernels complete the connection
# before the server hears of it), so there, as in the sanitizer and valgrind stages
# (EVRDMA_STRESS=light), 60 attacks prove that each is closed with its reason and the next answered.
#   early_failure_test.sh <build dir> [attacks]
set -u -o pipefail
build=$1
attacks=${2:-300}
{ [ "${EVRDMA_STRESS:-}" = light ] || [ "${EVRDMA_RDMA_DRIVER:-}" = siw ]; } && attacks=60
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"

"$build/demos/blast-server" -a "$address" -p 0 >"$log/server" 2>&1 &
server=$!
port=$(listening_port "$log/server" "$server")
[ -n "$port" ] || { echo "FAILED: blast-server did not start"; cat "$log/server"; exit 1; }

failed=0
made=0
started=$(date +%s)
for i in $(seq "$attacks"); do
    made=$i
    # Alternately a data frame before the hello and a frame that is no frame at all.
    attack=blast-data-before-hello
    [ $((i % 2)) = 0 ] && attack=blast-garbage-frame
    outcome=$("$build/tests/hostile-client" -a "$address" -p "$port" -w 15000 "$attack" 2>&1)
    if [[ ! $outcome =~ ^closed\ by\ the\ server ]]; then
        failed=$((failed + 1))
        echo "FAILED: attack $i ($attack): $outcome"
        [ $failed -ge 3 ] && break
    fi
done
kill -INT $server
for _ in $(seq 300); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
kill -0 $server 2>/dev/null && { echo "FAILED: blast-server did not end on SIGINT"; exit 1; }
closed=$(grep -c "Protocol error" "$log/server")
grep "^blast-server: served" "$log/server"
echo "$made attacks in $(( $(date +%s) - started )) s; the server named the protocol error $closed times"
[ "$failed" = 0 ] && [ "$closed" = "$attacks" ] && { echo "ok: every attack closed with its reason, every next one answered"; exit 0; }
echo "FAILED: $failed attacks not closed by the server"
exit 1
