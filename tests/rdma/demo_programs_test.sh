#!/bin/bash
# The demo programs against each other over real RDMA (run under tools/rdma-run): the README's
# embedded example against pingpong-server, pingpong-server with worker threads and shared
# receive queues, the devices listing, the loop-latency benchmark and make bench's raw-pingpong.
#   demo_programs_test.sh <build dir>
set -u
build=$1 failures=0
. "$(dirname "${BASH_SOURCE[0]}")/../lib/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
check() { if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAILED: $1 (status $2)"; failures=$((failures + 1)); fi; }

log=$(mktemp)
"$build/demos/pingpong-server" -a "$address" -p 0 -e 1 >"$log" 2>&1 &
server=$!
port=$(listening_port "$log" "$server")
out=$("$build/demos/hello_embedded" "$address" "$port" 2>&1)
check "hello_embedded gets its echo: $out" $([ "$out" = "echo: hello" ]; echo $?)
wait "$server"
check "pingpong-server served it and exited" $?
cat "$log"

# One loop per core, with shared receive queues: two worker threads serve 16 verified clients.
"$build/demos/pingpong-server" -a "$address" -p 0 -w 2 -S -x -e 16 >"$log" 2>&1 &
server=$!
port=$(listening_port "$log" "$server")
"$build/demos/pingpong-client" -a "$address" -p "$port" -n 16 -c 100 -v -x >"$log.client" 2>&1
check "pingpong-client: 16 clients verified against pingpong-server -w 2 -S" $?
# make bench compares this average with ib_send_lat's t_avg, which leaves its 2 longest out too.
grep "averages it" "$log.client"
check "pingpong-client -x prints the round trip averaged as ib_send_lat averages it" \
    $(grep -qE "as ib_send_lat averages it \(its 2 longest left out\): [0-9.]+ us" "$log.client"; echo $?)
rm -f "$log.client"
wait "$server"
check "pingpong-server -w 2 -S served them and exited" $?
grep -E "served|worker|shared receive" "$log"
check "both workers took clients" $([ "$(grep -cE "worker [01]: [1-9][0-9]* clients accepted" "$log")" = 2 ]; echo $?)

# -b spreads the connections over local addresses: the test bed's own and those rdma-run
# --addresses made (make test asks for 2), connection i from the (i mod k)th.
sources=$address${EVRDMA_RDMA_SOURCE_IPS:+,$EVRDMA_RDMA_SOURCE_IPS}
IFS=, read -ra source_list <<<"$sources"
clients=$((2 * ${#source_list[@]}))
"$build/demos/pingpong-server" -a "$address" -p 0 -x -e "$clients" >"$log" 2>&1 &
server=$!
port=$(listening_port "$log" "$server")
"$build/demos/pingpong-client" -a "$address" -p "$port" -n "$clients" -c 10 -v -b "$sources" >"$log.client" 2>&1
check "pingpong-client -b $sources: $clients clients verified" $?
wait "$server"
spread=0
for source in "${source_list[@]}"; do
    [ "$(grep -c "^agent $source:[0-9]*: 10 echoes" "$log")" = 2 ] && spread=$((spread + 1))
done
check "the server saw 2 clients from each of the ${#source_list[@]} addresses ($(grep -c '^agent ' "$log") agents)" \
    $([ $spread = ${#source_list[@]} ]; echo $?)
"$build/demos/pingpong-client" -a "$address" -p "$port" -c 1 -b 192.0.2.250 >/dev/null 2>"$log.client"
check "pingpong-client -b with an address not of this host says so: $(cat "$log.client")" \
    $(grep -q "from 192.0.2.250: .*not an address of this host" "$log.client"; echo $?)
"$build/demos/pingpong-client" -a "$address" -p "$port" -c 1 -b "$address,," >/dev/null 2>"$log.client"
check "pingpong-client -b with an empty address is bad usage: $(cat "$log.client")" $(grep -q "bad value" "$log.client"; echo $?)
rm -f "$log.client"

"$build/demos/devices" | tee "$log"
check "devices lists ${EVRDMA_RDMA_DEV:-?} with an active port" $(grep -q "^${EVRDMA_RDMA_DEV:-?}:" "$log" && grep -q "state active" "$log"; echo $?)
"$build/demos/evrdma-loop-latency" -a "$address" -d 1 | tee "$log"
status=${PIPESTATUS[0]}
check "evrdma-loop-latency measures quiet, an RDMA flood, a stream flood and a TCP flood and prints each flood's ratio" \
    $([ "$status" = 0 ] && grep -q "^quiet" "$log" && grep -q "^rdma" "$log" && grep -q "^stream" "$log" &&
      grep -q "^tcp" "$log" && grep -q "^ratio flood/quiet, rdma" "$log" && grep -q "^ratio flood/quiet, stream" "$log" &&
      grep -q "^ratio flood/quiet, tcp" "$log" && grep -q "^stream flood against the TCP flood" "$log"; echo $?)
"$build/demos/evrdma-loop-latency" -a "$address" -d 1 -A | tee "$log"
status=${PIPESTATUS[0]}
check "evrdma-loop-latency -A gives the application's events libevent priority 0 and measures all four phases" \
    $([ "$status" = 0 ] && grep -q "^stream" "$log" && grep -q "^tcp" "$log" && grep -q "the application's events first" "$log"; echo $?)
"$build/demos/evrdma-loop-latency" >/dev/null 2>"$log"
status=$?
check "evrdma-loop-latency without -a says what is missing: $(cat "$log")" $([ "$status" = 2 ] && grep -q "required" "$log"; echo $?)
# make bench's floor for polling: raw-pingpong's two roles, every echo checked by its number (at
# 1 B, by the byte of it that the message holds: make bench compares 1 B with 1 B).
for size in 4096 1; do
    "$build/demos/raw-pingpong" -S -a "$address" -p 0 >"$log" 2>&1 &
    server=$!
    port=$(listening_port "$log" "$server")
    out=$("$build/demos/raw-pingpong" -a "$address" -p "$port" -c 200 -s "$size" 2>&1)
    status=$?
    echo "$out"
    [ "$status" = 0 ] || kill "$server" 2>/dev/null  # a server with no client would wait for ever
    check "raw-pingpong: 200 round trips of $size B, echoes checked, figures printed" \
        $([ "$status" = 0 ] && echo "$out" | grep -q "round trips of $size bytes" &&
           echo "$out" | grep -q "round trip: median" &&
           echo "$out" | grep -qE "as ib_send_lat averages it \(its 2 longest left out\): [0-9.]+ us"; echo $?)
    wait "$server"
    check "raw-pingpong -S served the $size B client and exited" $?
done
for program in devices pingpong-server pingpong-client blast-server blast-client evrdma-rping \
               evrdma-loop-latency raw-pingpong; do
    for flag in --help -h; do
        "$build/demos/$program" "$flag" >"$log" 2>&1
        status=$?
        check "$program $flag prints its usage and exits 0" $([ "$status" = 0 ] && grep -qi "usage" "$log"; echo $?)
    done
done
"$build/demos/pingpong-client" -a nonsense -c 1 >/dev/null 2>"$log"
check "pingpong-client rejects a bad address clearly: $(cat "$log")" $(grep -q "not a numeric address" "$log"; echo $?)
rm -f "$log"
exit $((failures > 0))
