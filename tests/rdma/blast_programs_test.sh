#!/bin/bash
# blast-server and blast-client over real RDMA (run under tools/rdma-run): every mode with every
# byte verified and several connections at once, 1 B to 4 MiB operations, the server's checks of a
# request (rejected with a reason the client prints), write_imm refused clearly on iWARP, the OFA
# notes' blast-sr-2 wire protocol (-o ofa) in both roles, usage.
#   blast_programs_test.sh <build dir>
# A status is saved before `check`: a $(...) in check's message would overwrite $?.
set -u
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
iwarp=0
ibv_devinfo -d "${EVRDMA_RDMA_DEV:-?}" 2>/dev/null | grep -q "transport:.*iWARP" && iwarp=1
# The sanitizer and valgrind stages (EVRDMA_STRESS=light) look for memory errors, not a transport's
# rare timing: the largest blast-sr-2 run, the runs of acks into 3 receives and each mode's verified
# runs are shorter there (the list run's count still ends in a part list).
ofa_large=300 rounds=10 mode_count=300 list_count=1001
[ "${EVRDMA_STRESS:-}" = light ] && ofa_large=100 rounds=1 mode_count=100 list_count=201

start_server() {  # options...
    "$build/demos/blast-server" -a "$address" -p 0 "$@" >"$log/server" 2>&1 &
    server=$!
    port=$(listening_port "$log/server" "$server")
}
client() { "$build/demos/blast-client" -a "$address" -p "$port" "$@" >"$log/client" 2>&1; }

modes="send write write_imm read"
[ "$iwarp" = 1 ] && modes="send write read"
runs=$(( $(echo $modes | wc -w) * 4 + 2 ))
start_server -x -e "$runs" -P 100
for mode in $modes; do
    client -m "$mode" -v -n 3 -b 8 -s 65536 -c "$mode_count" -x
    status=$?
    check "blast -m $mode -v, 3 connections x $mode_count x 64 KiB: $(grep 'all connections' "$log/client")" $status
    # In lists of 8 (the count's tail is not a whole list), polling adaptively on both sides.
    client -m "$mode" -v -b 16 -l 8 -s 4096 -c "$list_count" -P 100
    status=$?
    check "blast -m $mode -v -l 8 -P 100, $list_count x 4 KiB: $(grep 'all connections' "$log/client")" $status
done
client -m send -v -b 4 -s 1 -c 1000
status=$?
check "blast -m send -s 1 (1 B messages) verified: $(tail -n 1 "$log/client")" $status
client -m read -v -b 2 -s 4194304 -c 8
status=$?
check "blast -m read -s 4 MiB verified: $(tail -n 1 "$log/client")" $status
wait "$server"
check "blast-server served all $runs clients, every one checked, and exited 0" $?
cat "$log/server"

if [ "$iwarp" = 1 ]; then
    start_server -e 1
    client -m write_imm -c 10
    status=$?
    check "write_imm on iWARP fails clearly: $(head -n 1 "$log/client")" \
        $([ $status = 1 ] && grep -q "iWARP.*does not have" "$log/client"; echo $?)
    wait "$server"
fi

start_server -s 1024 -b 4
client -m write -b 2 -s 4096 -c 10
status=$?
check "a request over the server's size limit is rejected with its reason: $(head -n 1 "$log/client")" \
    $([ $status = 1 ] && grep -q "rejected: size 4096 not in 1..1024" "$log/client"; echo $?)
client -m send -b 5 -s 64 -c 10
check "too many buffers are rejected with the reason: $(head -n 1 "$log/client")" \
    $(grep -q "rejected: buffers 5 not in 1..4" "$log/client"; echo $?)
kill -TERM "$server"
wait "$server"
check "blast-server stops cleanly on SIGTERM" $?
grep -q "rejected 2 requests" "$log/server"
status=$?
check "blast-server counted both rejections: $(tail -n 1 "$log/server")" $status

# blast-sr-2 on the wire (-o ofa): both roles against each other, every byte checked by the server;
# an ack is due at a third of the buffers, so 1, 9 and 30 buffers take acks of 1, 3 and 10.
start_server -o ofa -v -x -b 64 -e 5
client -o ofa -c 100 -s 64 -b 65
status=$?
check "blast-sr-2: a request past the server's -b 64 is rejected with the reason: $(grep rejected "$log/client")" \
    $([ $status != 0 ] && grep -q "n_data_buffers 65 out of range 1..64" "$log/client"; echo $?)
client -o ofa -v -c 2000 -s 4096 -b 9 -x
status=$?
check "blast-sr-2: 2000 x 4 KiB, 9 buffers, every byte checked: $(grep 'blast-sr-2:' "$log/client" | head -n 1)" $status
client -o ofa -v -c 1000 -s 1 -b 1
status=$?
check "blast-sr-2: 1000 x 1 B, 1 buffer (an ack per message): $(tail -n 1 "$log/client")" $status
client -o ofa -v -c "$ofa_large" -s 65536 -b 30 -n 3 -x
status=$?
check "blast-sr-2: 3 connections x $ofa_large x 64 KiB, 30 buffers: $(grep "connections sent" "$log/client")" $status
wait "$server"
status=$?
check "blast-server -o ofa served and checked every client, rejected 1, and exited 0: $(grep "served" "$log/server")" \
    $([ $status = 0 ] && grep -q "rejected 1 requests" "$log/server"; echo $?)
grep -E "^agent .*blast-sr-2" "$log/server" | head -n 3

# A client that posts exactly 3 receives for acks, as the OFA notes' client does, and 4 data
# buffers (an ack per message or two): an ack sent into a receive the client has not posted again
# yet ends the connection on iWARP (RoCE retries it). The server takes an ack as read only once a
# message that only its credits allowed has arrived, never on its send completion.
start_server -o ofa -e "$rounds"
good=0
for round in $(seq "$rounds"); do
    client -o ofa -c 2000 -s 65536 -b 4 && good=$((good + 1)) || tail -n 2 "$log/client"
done
wait "$server"
status=$?
check "blast-sr-2, acks into exactly 3 receives: $good of $rounds runs of 2000 x 64 KiB with 4 buffers, server status $status" \
    $([ "$good" = "$rounds" ] && [ "$status" = 0 ]; echo $?)

for program in blast-server blast-client; do
    "$build/demos/$program" --help >/dev/null 2>&1 || "$build/demos/$program" -h >/dev/null 2>&1
    check "$program has --help/-h" $?
done
"$build/demos/blast-client" -a "$address" -m bogus >/dev/null 2>"$log/client"
status=$?
check "blast-client refuses an unknown mode with usage status 2: $(cat "$log/client")" \
    $([ $status = 2 ] && grep -q "bad value 'bogus' for -m" "$log/client"; echo $?)
"$build/demos/blast-client" -a 10.255.255.1.7 >/dev/null 2>"$log/client"
check "blast-client rejects a bad address clearly: $(cat "$log/client")" $(grep -q "not a numeric address" "$log/client"; echo $?)
exit $((failures > 0))
