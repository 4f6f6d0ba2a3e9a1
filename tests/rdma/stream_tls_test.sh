#!/bin/bash
# TLS over an evrdma stream, in both roles, as over a socket (run under tools/rdma-run): libevent's
# OpenSSL filter (bufferevent_openssl_filter_new) on stream-bench's bufferevents, the server's end
# accepting, the client's connecting. Random bytes in writes of random sizes go both ways with
# equal SHA-256 (2 MiB), a throughput run's server counts every byte, a ping-pong completes, a
# client that speaks no TLS is turned away while the server goes on serving; the same steps over
# TCP, where libevent's filter is known to work, say the stream behaves as a socket does.
#   stream_tls_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
bench=$build/demos/stream-bench
said=$log/said
bytes=$((2 << 20))

for transport in rdma tcp; do
    "$bench" --server --$transport "$address" 0 --tls >"$log/server-$transport" 2>&1 &
    server=$!
    listening_port "$log/server-$transport" >/dev/null
    port=$(sed -n "s/.* $transport+tls port \([0-9]*\)\$/\1/p" "$log/server-$transport" | head -n 1)
    check "stream-bench --server --$transport --tls listens (port '$port')" $([ -n "$port" ]; echo $?)
    "$bench" --$transport "$address" "$port" --tls --verify --bytes $bytes >"$said" 2>&1
    status=$?
    check "$transport+tls: $bytes random bytes echoed, SHA-256 equal: $(cut -c1-160 "$said")" \
        $([ $status = 0 ] && grep -q "$transport+tls verify bytes=$bytes received=$bytes .* equal" "$said"; echo $?)
    "$bench" --$transport "$address" "$port" --tls --throughput --bytes $bytes >"$said" 2>&1
    status=$?
    check "$transport+tls: the server counted every byte of a throughput run: $(cat "$said")" \
        $([ $status = 0 ] && grep -q "$transport+tls throughput size=65536 bytes=$bytes" "$said"; echo $?)
    "$bench" --$transport "$address" "$port" --tls --latency --count 200 >"$said" 2>&1
    check "$transport+tls: a ping-pong completes: $(cat "$said")" \
        $(grep -q "$transport+tls latency size=64 count=200" "$said"; echo $?)
    "$bench" --$transport "$address" "$port" --throughput --bytes 100000 >"$said" 2>&1
    status=$?
    check "$transport: a client without TLS is turned away (exit 1): $(cat "$said")" $([ $status = 1 ]; echo $?)
    "$bench" --$transport "$address" "$port" --tls --verify --bytes 100000 --seed 7 >"$said" 2>&1
    status=$?  # (taken before the check's own $(...) sets $?)
    check "$transport+tls: the server still serves after it: $(cut -c1-100 "$said")" $status
    kill -INT $server
    wait $server
    check "stream-bench --server --$transport --tls ends on SIGINT with exit 0" $?
done
echo "$failures failed"
[ "$failures" = 0 ]
