#!/bin/bash
# Connect requests a client never completes (hostile-client half-open: on RoCE ids without a QP,
# whose answers are never taken up, so no RTU ever comes; on iWARP, where the kernels complete a
# connection by themselves, connections whose client never reads an event).
#  1. 16 requests for 16 MiB messages (64 MiB of buffers each) against pingpong-server while a
#     well-behaved client runs: the server pins at most its bound for clients not yet connected
#     (-U 128: large requests share 96 MiB of it, so one at a time, and the rest is kept for small
#     ones), the others wait their turn; the good client is served meanwhile, every byte verified
#     (its longest round trip is printed: a figure, not a proof).
#  2. Thousands of them (siw: 50, it holds about 70 QPs per process) against pingpong-server -w 2,
#     held (-W 0: no accept timeout) until the attacker is killed, which abandons them all at once,
#     and SIGINT comes right then: the server ends, exit status 0, having closed every agent.
#     (Before, a handler the factory made for a request abandoned before its worker took it never
#     heard onClosed, and the server waited for it for ever.)
# On iWARP the kernels complete each connection by themselves: the bound holds while each agent is
# set up, and the established ones keep their memory. There case 1 asks for 4: siw gives a connect
# 10 s for the server's answer (MPAREQ_TIMEOUT) and the large requests are set up one after another
# (0.1-0.3 s each here, seconds on a slow host: 12 of them once ran out of it, 3 of them failing
# with ETIMEDOUT); 3 of the 4 still wait their turn. The time of the last answer is printed.
#   half_open_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
hostile=$build/tests/hostile-client
siw=0; [ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && siw=1
# The sanitizer and valgrind stages (EVRDMA_STRESS=light) look for memory errors, not volume: case 1
# sends 8 large requests there and the good client makes 500 round trips (16 and 2000 elsewhere).
large=16 round_trips=2000
[ "${EVRDMA_STRESS:-}" = light ] && large=8 round_trips=500
[ "$siw" = 1 ] && large=4
# wait_for <file> <pattern> <pid>: until <file> has a line matching <pattern> (up to 120 s; less
# if process <pid> ends first).
wait_for() {
    local _
    for _ in $(seq 2400); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.05
    done
    grep -qE "$2" "$1" 2>/dev/null
}

# (A message built with $(...) would overwrite $?: each status is kept before its check.)
# 1. Large half-open requests beside a good client.
"$build/demos/pingpong-server" -a "$address" -p 0 -x -U 128 -W 1000 >"$log/server1" 2>&1 &
server=$!
port=$(listening_port "$log/server1" $server)
[ -n "$port" ] || { echo "FAILED: pingpong-server did not start"; cat "$log/server1"; exit 1; }
"$build/demos/pingpong-client" -a "$address" -p "$port" -c "$round_trips" -s 65536 -v -x >"$log/good" 2>&1 &
good=$!
"$hostile" -a "$address" -p "$port" -n $large -s 16777216 -w 100000 half-open >"$log/hostile1" 2>&1 &
attacker=$!
wait_for "$log/hostile1" "^answered $large of $large \($large accepted" $attacker
status=$?
check "all $large large requests were accepted in turn: $(tail -n 1 "$log/hostile1")" $status
wait $good
status=$?
check "the good client finished, every echo verified: $(grep -m1 'round trips of' "$log/good")" $status
[ $status = 0 ] || tail -n 3 "$log/good"
kill $attacker 2>/dev/null
wait $attacker 2>/dev/null
kill -INT $server
wait $server
echo "  (exit status $?: 1 on RoCE, where the half-open agents fail with ETIMEDOUT, as they should)"
listener=$(grep "listener:" "$log/server1")
waited=$(sed -n 's/.* \([0-9]*\) waited for memory.*/\1/p' <<<"$listener")
most=$(sed -n 's/.*at most \([0-9]*\) MiB pinned at once.*/\1/p' <<<"$listener")
[ -n "$waited" ] && [ "$waited" -gt 0 ]
check "requests waited for memory: ${waited:-none}" $?
grep -m1 "longest round trip" "$log/good" | sed 's/^/  figure: /' 
[ -n "$most" ] && [ "$most" -le 128 ] && [ "$most" -ge 64 ]
check "at most ${most:-?} MiB pinned at once for clients not yet connected (bound 128)" $?

# 2. SIGINT while thousands of requests are held, with workers.
count=2000; [ "$siw" = 1 ] && count=50
"$build/demos/pingpong-server" -a "$address" -p 0 -w 2 -W 0 -x >"$log/server2" 2>&1 &
server=$!
port=$(listening_port "$log/server2" $server)
[ -n "$port" ] || { echo "FAILED: pingpong-server -w 2 did not start"; cat "$log/server2"; exit 1; }
"$hostile" -a "$address" -p "$port" -n $count -w 600000 half-open >"$log/hostile2" 2>&1 &
attacker=$!
wait_for "$log/hostile2" "^answered $count of $count \($count accepted" $attacker
status=$?
check "$count requests accepted and held: $(tail -n 1 "$log/hostile2")" $status
{ kill -KILL $attacker; wait $attacker; } 2>/dev/null
kill -INT $server
status=timeout
for _ in $(seq 1200); do
    kill -0 $server 2>/dev/null || { wait $server; status=$?; break; }
    sleep 0.05
done
closing=$(grep -m1 closing "$log/server2")
[ "$status" = 0 ]
check "pingpong-server -w 2 ended on SIGINT with $count requests held (status $status): $closing" $?
[ "$status" = timeout ] && { kill -KILL $server; tail -n 5 "$log/server2"; }
grep "worker [0-9]:" "$log/server2" | sed 's/^/  figure: /' 
[ "$failures" = 0 ]
