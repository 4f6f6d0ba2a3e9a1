#!/bin/bash
# The samples in demos/samples do what their opening comments say, over real RDMA (run under
# tools/rdma-run): hello_embedded gets its echo from echo_server, which drains and exits 0 on
# SIGINT; remote_memory writes into memory the server lent, reads it back the same, and the server
# sees the message in its region when it comes back; hello_stream's clients (C, a byte stream) get
# their messages back from its server, then EOF; each takes --help.
#   samples_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"

said=$log/said  # what a program printed
"$build/demos/echo_server" "$address" 0 >"$log/server" 2>&1 &
server=$!
port=$(listening_port "$log/server" "$server")
check "echo_server listens (port '$port')" $([ -n "$port" ]; echo $?)
for i in 1 2; do
    out=$("$build/demos/hello_embedded" "$address" "$port" 2>&1)
    check "hello_embedded $i gets its echo from echo_server: $out" $([ "$out" = "echo: hello" ]; echo $?)
done
kill -INT "$server"
wait "$server"
check "echo_server drains and exits 0 on SIGINT" $?
check "echo_server told of both connections, one message each" \
    $([ "$(grep -c 'closed after 1 messages' "$log/server")" = 2 ]; echo $?)
cat "$log/server"

out=$("$build/demos/remote_memory" "$address" 2>&1)
status=$?
echo "$out"
check "remote_memory exits 0" "$status"
check "remote_memory reads back what it wrote into the lent region" \
    $(echo "$out" | grep -q "read them back: the same"; echo $?)
check "the server sees the message in its region when it comes back" \
    $(echo "$out" | grep -q 'the region came back holding "written and read back by RDMA'; echo $?)

"$build/demos/hello_stream" --listen "$address" 0 >"$log/stream-server" 2>&1 &
stream_server=$!
stream_port=$(listening_port "$log/stream-server" "$stream_server")
check "hello_stream --listen listens (port '$stream_port')" $([ -n "$stream_port" ]; echo $?)
out=$("$build/demos/hello_stream" "$address" "$stream_port" 2>&1)
check "hello_stream's client gets its hello back, then EOF: $out" $([ "$out" = "echo: hello" ]; echo $?)
out=$("$build/demos/hello_stream" "$address" "$stream_port" "every byte, then EOF" 2>&1)
check "hello_stream's client gets its own message back: $out" $([ "$out" = "echo: every byte, then EOF" ]; echo $?)
kill -INT "$stream_server"
wait "$stream_server"
check "hello_stream's server exits 0 on SIGINT" $?
"$build/demos/hello_stream" "$address" >"$said" 2>&1
status=$?
check "hello_stream without a port prints its usage and exits 2" $([ "$status" = 2 ] && grep -q "usage" "$said"; echo $?)
"$build/demos/hello_stream" nonsense 1 >"$said" 2>&1
status=$?
check "hello_stream names a bad address and exits 2: $(cat "$said")" \
    $([ "$status" = 2 ] && grep -q "'nonsense' is not a numeric" "$said"; echo $?)

for program in hello_embedded echo_server remote_memory hello_stream; do
    "$build/demos/$program" --help >"$said" 2>&1
    status=$?
    check "$program --help prints its usage and exits 0" $([ "$status" = 0 ] && grep -qi usage "$said"; echo $?)
done
"$build/demos/echo_server" nonsense >"$said" 2>&1
status=$?
check "echo_server names a bad address and exits 1: $(cat "$said")" \
    $([ "$status" = 1 ] && grep -q "listen on nonsense" "$said"; echo $?)
for program in hello_embedded echo_server hello_stream; do
    "$build/demos/$program" "$address" 70000 >"$said" 2>&1
    status=$?
    check "$program refuses port 70000 (it would have wrapped to 4464) and exits 2: $(cat "$said")" \
        $([ "$status" = 2 ] && grep -q "'70000' is not a port" "$said"; echo $?)
done
echo "$failures failed"
[ "$failures" = 0 ]
