#!/bin/bash
# evrdma-rping against the real rping from rdmacm-utils, both ways, over real RDMA (run under
# tools/rdma-run): their server with our client, our server with their client, our persistent
# server with several clients at once (ours and theirs), and clear failures.
#   rping_interop_test.sh <build dir>
set -u
build=$1
ours="$build/demos/evrdma-rping"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
ip=$address
command -v rping >/dev/null || { echo "FAILED: rping (rdmacm-utils) is not installed"; exit 1; }
# The real rping prints nothing when it listens: wait until the port is bound.
wait_listening() { for _ in $(seq 100); do rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*src-addr $ip:$1\|$ip:$1.*LISTEN" && return 0; sleep 0.1; done; sleep 1; }

# 1. Their server, our client.
rping -s -a "$ip" -p 7201 -V >"$log/theirs" 2>&1 &
server=$!
wait_listening 7201
"$ours" -c -a "$ip" -p 7201 -C 100 -V -v >"$log/ours" 2>&1
status=$?
check "our client against rping -s: 100 pings validated (last: $(grep -c '^ping data' "$log/ours") lines, $(tail -n 1 "$log/ours" | cut -c1-40))" \
    $([ $status = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' "$log/ours")" = 100 ] && grep -q '^ping data: rdma-ping-99: ' "$log/ours"; echo $?)
wait "$server"
check "rping -s served our client and exited 0" $?

# 2. Our server, their client.
"$ours" -s -a "$ip" -p 7202 -v -d >"$log/ours" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$log/ours" && break; sleep 0.05; done
rping -c -a "$ip" -p 7202 -C 100 -V -v >"$log/theirs" 2>&1
status=$?
check "rping -c against our server: 100 pings validated ($(grep -c '^ping data' "$log/theirs") lines)" \
    $([ $status = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' "$log/theirs")" = 100 ]; echo $?)
wait "$server"
server_status=$?
check "our server served rping -c, saw its 100 pings and exited 0: $(tail -n 1 "$log/ours")" \
    $([ $server_status = 0 ] && grep -q "after 100 pings" "$log/ours"; echo $?)

# 3. Our persistent server, three of our clients and one of theirs at once, 1000-byte pings.
"$ours" -s -P -a "$ip" -p 7203 -S 1000 -d >"$log/server" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$log/server" && break; sleep 0.05; done
pids=()
for i in 1 2 3; do "$ours" -c -a "$ip" -p 7203 -S 1000 -C 50 -V >"$log/ours$i" 2>&1 & pids+=($!); done
rping -c -a "$ip" -p 7203 -S 1000 -C 50 -V >"$log/theirs" 2>&1 & pids+=($!)
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
check "four clients at once against our persistent server, 50 validated pings each" $status
kill -TERM "$server"
wait "$server"
server_status=$?
check "our persistent server stops on SIGTERM with no failed client: $(tail -n 1 "$log/server")" \
    $([ $server_status = 0 ] && grep -q "served 4 clients, 0 failed" "$log/server"; echo $?)

# 4. Mismatched sizes: their client pings with more than our server's buffer.
"$ours" -s -a "$ip" -p 7204 -S 64 -d >"$log/ours" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$log/ours" && break; sleep 0.05; done
# (rping -c exits 0 whenever the server disconnects it: count its pings instead.)
timeout 30 rping -c -a "$ip" -p 7204 -S 1000 -C 5 -V -v >"$log/theirs" 2>&1
wait "$server"
server_status=$?
check "a client pinging with more than our -S is refused clearly: $(grep 'advertised' "$log/ours")" \
    $([ "$(grep -c '^ping data' "$log/theirs")" = 0 ] && [ $server_status = 1 ] && grep -q "advertised 1000 bytes" "$log/ours"; echo $?)

# 5. Nobody listening, and usage.
"$ours" -c -a "$ip" -p 7205 -C 1 >/dev/null 2>"$log/ours"
status=$?
check "our client with nobody listening fails clearly: $(cat "$log/ours")" \
    $([ $status = 1 ] && grep -q "refused" "$log/ours"; echo $?)
"$ours" -h >/dev/null
check "evrdma-rping -h" $?
"$ours" -a "$ip" >/dev/null 2>&1
status=$?
check "evrdma-rping without -s or -c is a usage error" $([ $status = 2 ]; echo $?)
"$ours" -c -a "$ip" -S 10 >/dev/null 2>"$log/ours"
status=$?
check "evrdma-rping refuses a size below the minimum: $(cat "$log/ours")" $([ $status = 2 ]; echo $?)
exit $((failures > 0))
