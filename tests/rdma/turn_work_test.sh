#!/bin/bash
# A server's work per round trip does not grow with the agents that have none (issue 56): one
# client ping-pongs with pingpong-server beside FEW idle agents, then beside MANY (100 times as
# many, on some 60 more shared CQs, each agent with its keepalive tick queued), and callgrind
# counts the server's instructions per round trip: the difference between a run of N2 and one of
# N1 round trips over N2 - N1 (set-up, the idle agents' connects and teardown cancel), no clock
# read. The bound: half an instruction more per idle agent (150 at least). Polling every CQ at
# each wake-up, as before the busy CQs were told apart, costs 1.26 an idle agent (2 516 -> 3 007
# beside 10 and 400); a walk of the agents or their timers would cost more.
# Needs valgrind (make deps); not for sanitized builds (the asan stage leaves it out).
set -u
build=${1:?usage: turn_work_test.sh BUILD_DIR}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
command -v valgrind >/dev/null || { echo "turn_work_test: valgrind is missing (make deps)"; exit 1; }
few=10 many=1000 n1=200 n2=1200
[ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && many=60  # siw holds about 70 queue pairs a process
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
wait_for() { for _ in $(seq "${3:-2400}"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
keepalive=(-K 600000)  # a tick queued for every agent, none due while the test runs

measure() {  # measure IDLE TRIPS: the server's instructions over a run
    local idle=$1 trips=$2 out="$log/cg.$1.$2"
    valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out" \
        "$build/demos/pingpong-server" -a "$ip" -p 0 "${keepalive[@]}" >"$log/server" 2>&1 &
    local server=$!
    wait_for "$log/server" "listening on" || { echo "the server did not listen"; cat "$log/server"; return 1; }
    local port
    port=$(sed -n 's/.* port \([0-9]*\)$/\1/p' "$log/server" | head -n 1)
    "$build/demos/pingpong-client" -a "$ip" -p "$port" -n "$idle" -c 1 -s 64 -k "${keepalive[@]}" -C 300000 -R 120000 \
        >"$log/idle" 2>&1 &
    local idlers=$!
    wait_for "$log/idle" "holding them open" || { echo "the $idle idle clients did not connect"; cat "$log/idle"; return 1; }
    "$build/demos/pingpong-client" -a "$ip" -p "$port" -n 1 -c "$trips" -s 64 "${keepalive[@]}" -R 120000 >"$log/busy" 2>&1 ||
        { echo "the busy client failed"; cat "$log/busy"; return 1; }
    kill -INT "$idlers"; wait "$idlers"
    kill -INT "$server"; wait "$server"
    sed -n 's/^summary: \([0-9]*\).*/\1/p;s/^totals: \([0-9]*\).*/\1/p' "$out" | head -n 1
}
per_trip() {  # per_trip IDLE: instructions per round trip
    local a b
    a=$(measure "$1" $n1) && b=$(measure "$1" $n2) && [ -n "$a" ] && [ -n "$b" ] || return 1
    echo $(((b - a) / (n2 - n1)))
}
f=$(per_trip $few) || { echo "FAIL: measuring beside $few idle agents"; exit 1; }
m=$(per_trip $many) || { echo "FAIL: measuring beside $many idle agents"; exit 1; }
echo "the server's instructions per round trip (callgrind): $f beside $few idle agents, $m beside $many"
allowed=$(((many - few) / 2)); [ "$allowed" -lt 150 ] && allowed=150
slope=$(awk -v m="$m" -v f="$f" -v n=$((many - few)) 'BEGIN { printf "%.2f", (m - f) / n }')
if [ $((m - f)) -le "$allowed" ]; then
    echo "PASS: $((m - f)) instructions more a round trip beside $((many - few)) more idle agents ($slope each; at most $allowed)"
else
    echo "FAIL: beside $many idle agents a round trip cost $m instructions, beside $few $f: $slope more an idle agent (at most 0.5)"
    exit 1
fi
