#!/bin/bash
# The C stream programs in demos/stream do what they say, over real RDMA and TCP (run under
# tools/rdma-run): kv-server answers kv-client over each of its listeners (TCP and RDMA), both
# see one store, a line too long is refused, a taken port or a bad address is named, a refused
# connect says so; stream-bench's throughput and ping-pong runs end with the server's count equal
# to what was sent (1,000,000 bytes half-closed at once: more than the send window), its echo of
# random writes comes back with an equal SHA-256 (8 MiB; 2 MiB under EVRDMA_STRESS=light, the
# sanitizer and valgrind stages, which look for memory errors, not volume: there the bulk run is
# 4 MiB, not 16, and the 64-byte writes 250 000 bytes, not 1 000 000), and every program takes
# --help and ends on SIGINT with exit 0.
#   stream_programs_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
demos=$build/demos
said=$log/said  # what a program printed
verify_bytes=$((8 << 20)) bulk_bytes=16777216 small_bytes=1000000
[ "${EVRDMA_STRESS:-}" = light ] && verify_bytes=$((2 << 20)) bulk_bytes=4194304 small_bytes=250000

# port_of <log> <tcp|rdma>: the port a server printed for that transport (waits as listening_port).
port_of() {
    listening_port "$1" >/dev/null
    sed -n "s/.* $2 port \([0-9]*\)\$/\1/p" "$1" | head -n 1
}

"$demos/kv-server" "$address" >"$log/kv" 2>&1 &
kv=$!
tcp=$(port_of "$log/kv" tcp)
rdma=$(port_of "$log/kv" rdma)
check "kv-server listens on tcp port '$tcp' and rdma port '$rdma'" $([ -n "$tcp" ] && [ -n "$rdma" ]; echo $?)
for transport in tcp rdma; do
    port=$tcp; [ $transport = rdma ] && port=$rdma
    "$demos/kv-client" --$transport "$address" "$port" --check 3000 >"$said" 2>&1
    check "kv-client --$transport: 3000 SET and GET pipelined, every reply right: $(cat "$said")" \
        $(grep -q "6001 of 6001 replies, 0 wrong, all right" "$said"; echo $?)
done
printf 'SET shared written over rdma\nDEL missing\n' | "$demos/kv-client" --rdma "$address" "$rdma" >"$said" 2>&1
check "an RDMA client sets a key: $(tr '\n' '|' <"$said")" $([ "$(tr '\n' '|' <"$said")" = "OK|NOT_FOUND|BYE|" ]; echo $?)
printf 'GET shared\nBOGUS\nQUIT\n' | "$demos/kv-client" --tcp "$address" "$tcp" >"$said" 2>&1
check "a TCP client reads it from the same store: $(tr '\n' '|' <"$said")" \
    $([ "$(tr '\n' '|' <"$said")" = "VALUE written over rdma|ERROR unknown command 'BOGUS'|BYE|" ]; echo $?)
/usr/bin/python3 -c 'import sys; sys.stdout.write("SET big " + "x" * 70000)' |
    "$demos/kv-client" --rdma "$address" "$rdma" >"$said" 2>&1
check "a line past 64 KiB is refused and the connection closed: $(head -c 200 "$said")" \
    $(grep -q "ERROR line longer than 65536 bytes" "$said"; echo $?)

"$demos/kv-server" "$address" --tcp "$tcp" >"$said" 2>&1
status=$?
check "a second kv-server on the taken tcp port names it: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "tcp port $tcp: Address already in use" "$said"; echo $?)
"$demos/kv-server" "$address" --rdma "$rdma" >"$said" 2>&1
status=$?
check "a second kv-server on the taken rdma port names it: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "rdma port $rdma: Address already in use" "$said"; echo $?)
"$demos/kv-server" 300.1.2.3 >"$said" 2>&1
status=$?
check "kv-server names a bad address: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "listen on 300.1.2.3 .*: the address is not a numeric" "$said"; echo $?)
"$demos/kv-server" "$address" --rdma 70000 >"$said" 2>&1
status=$?
check "kv-server names a bad port: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "rdma port 70000: the port is not a number from 0 to 65535" "$said"; echo $?)
"$demos/kv-client" --rdma "$address" 7x >"$said" 2>&1 </dev/null
status=$?
check "kv-client names a bad port: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "port 7x: the port is not a number" "$said"; echo $?)
kill -INT "$kv"
wait "$kv"
check "kv-server ends on SIGINT with exit 0" $?
check "kv-server says what it served: $(tail -n 1 "$log/kv")" \
    $(grep -q "served 5 connections (2 tcp, 3 rdma)" "$log/kv"; echo $?)
"$demos/kv-client" --rdma "$address" "$rdma" </dev/null >"$said" 2>&1
status=$?
check "kv-client where nobody listens any more: $(cat "$said")" \
    $([ $status = 1 ] && grep -q "Connection refused" "$said"; echo $?)

for transport in tcp rdma; do
    "$demos/stream-bench" --server --$transport "$address" 0 >"$log/bench-$transport" 2>&1 &
    server=$!
    port=$(port_of "$log/bench-$transport" $transport)
    for bytes in 1000000 $bulk_bytes; do
        "$demos/stream-bench" --$transport "$address" "$port" --throughput --bytes $bytes >"$said" 2>&1
        status=$?
        check "stream-bench --$transport --throughput --bytes $bytes: the server counted every byte: $(cat "$said")" \
            $([ $status = 0 ] && grep -q "throughput size=65536 bytes=$bytes" "$said"; echo $?)
    done
    "$demos/stream-bench" --$transport "$address" "$port" --throughput --size 64 --bytes $small_bytes >"$said" 2>&1
    check "stream-bench --$transport, 64-byte writes: $(cat "$said")" $(grep -q "size=64 bytes=$small_bytes" "$said"; echo $?)
    "$demos/stream-bench" --$transport "$address" "$port" --verify --bytes $verify_bytes >"$said" 2>&1
    status=$?
    check "stream-bench --$transport --verify: $verify_bytes bytes of random writes echoed, SHA-256 equal: $(cut -c1-160 "$said")" \
        $([ $status = 0 ] && grep -q "received=$verify_bytes .* equal" "$said"; echo $?)
    "$demos/stream-bench" --$transport "$address" "$port" --latency --count 500 >"$said" 2>&1
    check "stream-bench --$transport --latency: $(cat "$said")" $(grep -q "latency size=64 count=500" "$said"; echo $?)
    if [ $transport = rdma ]; then
        "$demos/stream-bench" --rdma "$address" "$port" --latency --count 500 --poll 10 >"$said" 2>&1
        check "stream-bench --rdma --latency --poll 10 (a polling window): $(cat "$said")" \
            $(grep -q "latency size=64 count=500" "$said"; echo $?)
    fi
    kill -INT "$server"
    wait "$server"
    check "stream-bench --server --$transport ends on SIGINT with exit 0" $?
done

"$demos/stream-bench" --tcp "$address" 1 --latency --poll 10 >"$said" 2>&1
check "stream-bench refuses --poll over TCP (exit 2, its usage)" $([ $? = 2 ] && grep -q usage "$said"; echo $?)
for program in kv-server kv-client stream-bench; do
    "$demos/$program" --help >"$said" 2>&1
    status=$?
    check "$program --help prints its usage and exits 0" $([ "$status" = 0 ] && grep -qi usage "$said"; echo $?)
done
echo "$failures failed"
[ "$failures" = 0 ]
