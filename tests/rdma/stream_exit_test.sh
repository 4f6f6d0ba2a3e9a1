#!/bin/bash
# Nothing written is lost when a program exits the usual way, over real RDMA (run under
# tools/rdma-run): stream-exit-peer's writer connects, writes 1 MiB at once, leaves its loop, then
# bufferevent_free; evrdma_base_free; event_base_free with no loop turn in between (how kv-client
# and most programs end). Three writers in turn: the sink reads every byte intact, then EOF, each
# time. A fourth frees its bufferevent only after evrdma_base_free (the stream it still held goes
# as if freed), a fifth has a write callback whose run is still due when it leaves its loop, a
# sixth both: every byte, then EOF, each. Then a writer with a linger time of 0 (evrdma_base_set_linger):
# reset at once, as SO_LINGER 0, so the sink hears an error, not EOF. Under ASan each writer also
# proves it leaked nothing (LeakSanitizer fails its exit): a run of a stream's deferred callbacks
# still owed, which event_base_free drops unrun with its reference, once left the pair's two ends
# (and with the fourth the stream itself) unfreed. Each wait is for a line the sink prints
# (bounded at 60 s, which only catches a hang).
#   stream_exit_test.sh <build dir>
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
peer=$build/tests/stream-exit-peer
bytes=1048576 writers=3 streams=7

"$peer" sink "$address" $streams >"$log/sink" 2>&1 &
sink=$!
port=$(listening_port "$log/sink" $sink)
[ -n "$port" ] || { echo "FAILED: the sink did not listen"; cat "$log/sink"; exit 1; }
# stream_ended <n>: waits (up to 60 s) until the sink reported its stream <n>; prints that line.
stream_ended() {
    local _
    for _ in $(seq 1200); do
        grep -q "^stream $1:" "$log/sink" && break
        kill -0 $sink 2>/dev/null || break
        sleep 0.05
    done
    grep -m1 "^stream $1:" "$log/sink"
}

for n in $(seq $writers); do
    "$peer" write "$address" "$port" $bytes >"$log/writer$n" 2>&1
    status=$?  # (taken before the check's own $(...) sets $?)
    check "writer $n wrote $bytes bytes and exited at once after freeing everything: $(cat "$log/writer$n")" $status
    line=$(stream_ended $n)
    [ "$line" = "stream $n: $bytes bytes intact, EOF" ]
    check "the sink read every byte, then EOF: ${line:-nothing within 60 s}" $?
done

n=$((writers + 1))
"$peer" write "$address" "$port" $bytes --free-after >"$log/writer-held" 2>&1
status=$?  # (taken before the check's own $(...) sets $?)
check "a writer that frees its bufferevent after evrdma_base_free exited: $(cat "$log/writer-held")" $status
line=$(stream_ended $n)
[ "$line" = "stream $n: $bytes bytes intact, EOF" ]
check "the sink read every byte of the stream still held, then EOF: ${line:-nothing within 60 s}" $?

"$peer" write "$address" "$port" $bytes --write-callback >"$log/writer-callback" 2>&1
status=$?  # (taken before the check's own $(...) sets $?)
check "a writer whose write callback was still due when it left its loop exited: $(cat "$log/writer-callback")" $status
n=$((n + 1))
line=$(stream_ended $n)
[ "$line" = "stream $n: $bytes bytes intact, EOF" ]
check "the sink read every byte of that stream, then EOF: ${line:-nothing within 60 s}" $?

"$peer" write "$address" "$port" $bytes --write-callback --free-after >"$log/writer-callback-held" 2>&1
status=$?  # (taken before the check's own $(...) sets $?)
check "... and one that also frees its bufferevent after evrdma_base_free exited: $(cat "$log/writer-callback-held")" $status
n=$((n + 1))
line=$(stream_ended $n)
[ "$line" = "stream $n: $bytes bytes intact, EOF" ]
check "the sink read every byte of that stream, then EOF: ${line:-nothing within 60 s}" $?

"$peer" write "$address" "$port" $bytes --linger 0 >"$log/writer-reset" 2>&1
status=$?  # (taken before the check's own $(...) sets $?)
check "a writer with a linger time of 0 exited at once: $(cat "$log/writer-reset")" $status
n=$((n + 1))
line=$(stream_ended $n)
grep -q "^stream $n: [0-9]* bytes intact, ERROR: " <<<"$line"
check "linger 0 resets the stream: the sink heard an error, not EOF: ${line:-nothing within 60 s}" $?
wait $sink
check "the sink ended once every stream had" $?
[ "$failures" = 0 ]
