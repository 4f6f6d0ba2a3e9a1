# Sourced by the script tests and benchmarks that start a demo server on port 0.
# listening_port <log> [pid]: waits up to 10 s for the server's "listening on ... port N" line in
# <log> (less if process pid ends first) and prints N; prints nothing if the server never listened.
listening_port() {
    local log=$1 pid=${2:-} _
    for _ in $(seq 200); do
        grep -q listening "$log" 2>/dev/null && break
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && break
        sleep 0.05
    done
    sed -n 's/.* port \([0-9]*\)$/\1/p' "$log" | head -n 1
}

# hold_then_release <out> <pingpong-client command with -k...>: runs the client, its output in
# <out>, until it says it holds all its connections open (up to 60 s, less if it ends first), then
# sends it SIGINT and waits for it to end.
hold_then_release() {
    local out=$1 client _
    shift
    "$@" >"$out" 2>&1 &
    client=$!
    for _ in $(seq 1200); do
        grep -q "holding them open" "$out" && break
        kill -0 "$client" 2>/dev/null || break
        sleep 0.05
    done
    kill -INT "$client" 2>/dev/null
    wait "$client"
}
