#!/bin/bash
# The demo servers against a hostile raw librdmacm/verbs client (hostile-client), every attack in
# turn, while a well-behaved pingpong client and blast client run again and again alongside, every
# byte verified. Each attack must get the answer a careful server gives (a reject with a reason, or
# the connection closed), the good clients must never fail, and both servers must end cleanly on
# SIGINT afterwards, having named in their logs what each attacker did.
#   hostile_servers_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
hostile=$build/tests/hostile-client
start() {  # start <name> <program> <options...>: a server; sets port_<name>
    local name=$1 program=$2; shift 2
    "$build/demos/$program" -a "$address" -p 0 "$@" >"$log/$name" 2>&1 &
    printf -v "pid_$name" '%s' $!
    printf -v "port_$name" '%s' "$(listening_port "$log/$name" $!)"
}
start pingpong pingpong-server -x -M 256
start blast blast-server -x
[ -n "$port_pingpong" ] && [ -n "$port_blast" ] || { echo "FAILED: the servers did not start"; cat "$log"/*; exit 1; }

# The well-behaved clients, a run after another until check_alongside stops them.
run_alongside pingpong "$build/demos/pingpong-client" -a "$address" -p "$port_pingpong" -c 300 -s 4096 -v &
run_alongside blast "$build/demos/blast-client" -a "$address" -p "$port_blast" -m send -b 8 -s 4096 -c 1000 -v &

attack() {  # attack <port> <name> <what is expected: a regular expression of the outcome>
    local port=$1 name=$2 expected=$3 outcome status
    outcome=$("$hostile" -a "$address" -p "$port" -w 15000 "$name" 2>&1)
    status=$?
    [ "$status" = 0 ] && [[ $outcome =~ $expected ]]
    check "$name: $outcome" $?
}
# RoCE pads private data to 56 bytes with zeros, so 3 bytes arrive as a huge count; iWARP delivers
# them as they are, too short. Either way a reason, not a silent reject.
attack "$port_pingpong" pingsr-short-data '^rejected: [^(]'
attack "$port_pingpong" pingsr-zero-size '^rejected: .*data_size'
attack "$port_pingpong" pingsr-echo-hog '^closed by the server'
attack "$port_pingpong" pingsr-oversized '^closed by the server'
attack "$port_pingpong" pingsr-vanish '^vanished'
# The device refuses the write; on RoCE the agent's queue pair goes to the error state without an
# async event or a failed completion (only flushes): the agent must fail all the same.
attack "$port_pingpong" bad-rkey-write '^closed by the server'
attack "$port_blast" blast-bad-request '^rejected: unknown mode 9'
attack "$port_blast" blast-garbage-frame '^closed by the server'
attack "$port_blast" blast-data-before-hello '^closed by the server'
attack "$port_blast" blast-region-flood '^closed by the server'
attack "$port_blast" blast-credit-flood '^(closed by the server|still connected)'
# A region blast-server lent one client (write mode), written by another that learned its address
# and rkey: each lending connection has a protection domain of its own, so the device refuses the
# thief (RoCE: a remote access error; iWARP: the thief's connection is terminated) and the
# borrower reads back what it wrote. (With one domain for all, the region was overwritten.)
outcome=$("$build/tests/hostile-stream-peer" -a "$address" -p "$port_blast" -w 15000 borrowed-rkey 2>&1)
status=$?
[ "$status" = 0 ] && [[ $outcome =~ "the borrower's read back: success, the region unchanged"$ ]]
check "borrowed-rkey: $outcome" $?

check_alongside pingpong blast
kill -INT "$pid_pingpong" "$pid_blast" 2>/dev/null
for _ in $(seq 300); do [ -z "$(jobs -rp)" ] && break; sleep 0.1; done
[ -z "$(jobs -rp)" ]
check "both servers ended on SIGINT" $?
echo "what the servers said of the attackers:"
grep -h "error" "$log/pingpong" "$log/blast" | sed 's/^agent [0-9.:]*: .* error: /  /' | sort | uniq -c | head -n 20
[ "$failures" = 0 ]
