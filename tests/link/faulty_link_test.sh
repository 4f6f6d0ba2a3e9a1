#!/bin/bash
# The demo programs across a faulty link (run under tools/rdma-run --link): a server on end A, its
# clients on end B, netem on both ends of the veth between them.
#   faulty_link_test.sh <build dir> loss|delay|corruption|short-partition|long-partition
#   loss             1 % of the packets lost each way
#   delay            5 ms +- 2 ms each way, 10 % of the packets reordered (the jitter paced by a
#                    1 Gbit/s rate, so it keeps order by itself: jitter on each packet alone
#                    reorders most of a burst, and rxe's go-back-N then crawls: 20 sends took 16 s)
#   corruption       0.1 % of the packets corrupted each way
#     each: pingpong and blast in every mode complete with every byte verified, and a byte stream
#     (stream-bench --verify) echoes 16 MiB of random writes with equal SHA-256 (2 MiB with
#     EVRDMA_STRESS=light)
#   short-partition  the link drops everything for 2 s in the middle of a run: pingpong and blast
#                    finish with nothing lost
#   long-partition   the link drops everything until the client gives up: it ends with a clear
#                    error and no hang, the server closes its side, and once the link is back a
#                    new client is served
set -u -o pipefail
build=$1 case=$2
: "${EVRDMA_LINK_A_IP:?run this under tools/rdma-run --link}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
# A link of its own (tools/rdma-run --links N: tests run side by side, each with netem on its own
# link): the first one no other test holds, by a lock held until this script ends; the first link
# (waiting for it) when all are taken.
links=${EVRDMA_LINK_COUNT:-1}
for ((link = 0; link < links; link++)); do
    exec {link_lock}>"/tmp/evrdma-link-$link.lock"
    flock -n "$link_lock" && break
    exec {link_lock}>&-
done
if [ "$link" = "$links" ]; then
    link=0
    exec {link_lock}>/tmp/evrdma-link-0.lock
    flock "$link_lock"
fi
link_var() { local name=EVRDMA_LINK${link}_$1; echo "${!name:?no link $link in the test bed}"; }
a=$(link_var A_IP) a_netdev=$(link_var A_NETDEV) b_netdev=$(link_var B_NETDEV)
echo "link $link: A $a on $a_netdev, B on $b_netdev"
ends="$a_netdev $b_netdev"
iwarp=0; [ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && iwarp=1
fault() { for end in $ends; do tc qdisc replace dev "$end" root netem "$@" || exit 1; done; }
clear_faults() { for end in $ends; do tc qdisc del dev "$end" root 2>/dev/null; done; }
at_exit clear_faults
tx_packets() { cat "/sys/class/net/$b_netdev/statistics/tx_packets"; }
# Until the client's traffic flows across the link (connected, round trips under way).
wait_for_traffic() { local from; from=$(tx_packets); for _ in $(seq 300); do [ $(( $(tx_packets) - from )) -ge 100 ] && return 0; sleep 0.1; done; return 1; }
netem_dropped() { tc -s qdisc show dev "$1" | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -n 1; }
start() {  # start <name> <program> <options...>: a server on end A; sets port_<name>
    local name=$1 program=$2; shift 2
    "$build/demos/$program" -a "$a" -p 0 "$@" >"$log/$name" 2>&1 &
    printf -v "port_$name" '%s' "$(listening_port "$log/$name" $!)"
}
pingpong() { "$build/demos/pingpong-client" -a "$a" -p "$port_pingpong" -v "$@"; }
blast() { "$build/demos/blast-client" -a "$a" -p "$port_blast" -v "$@"; }
modes="send write write_imm read"; [ "$iwarp" = 1 ] && modes="send write read"
stream_mib=16; [ "${EVRDMA_STRESS:-}" = light ] && stream_mib=2  # sanitizers: the same paths, fewer bytes

start pingpong pingpong-server
start blast blast-server
"$build/demos/stream-bench" --server --rdma "$a" 0 >"$log/stream" 2>&1 &
port_stream=$(listening_port "$log/stream" $!)
[ -n "$port_pingpong" ] && [ -n "$port_blast" ] && [ -n "$port_stream" ] ||
    { echo "FAILED: the servers did not start"; cat "$log"/*; exit 1; }

every_program() {  # every_program <what>: pingpong and blast in every mode, every byte verified
    local what=$1 before status
    before=$(tx_packets)
    pingpong -c 200 -s 4096 >"$log/client" 2>&1
    status=$?
    check "$what: pingpong 200 x 4 KiB verified: $(tail -n 1 "$log/client")" $status
    for mode in $modes; do
        blast -m "$mode" -b 8 -s 4096 -c 2000 >"$log/client" 2>&1
        status=$?
        check "$what: blast -m $mode 2000 x 4 KiB verified: $(grep 'all connections' "$log/client")" $status
    done
    "$build/demos/stream-bench" --rdma "$a" "$port_stream" --verify --bytes $((stream_mib << 20)) >"$log/client" 2>&1
    status=$?
    check "$what: a stream echoes $stream_mib MiB of random writes, SHA-256 equal: $(cut -c1-120 "$log/client")" $status
    # The traffic really crossed the link (not the loopback).
    crossed=$(( $(tx_packets) - before ))
    [ "$crossed" -ge 400 ]
    check "$what: $crossed packets crossed the link from B" $?
}

case $case in
    loss)
        fault loss 1%
        every_program "1 % loss each way"
        dropped=$(( $(netem_dropped "$a_netdev") + $(netem_dropped "$b_netdev") ))
        [ "$dropped" -gt 0 ]
        check "netem dropped $dropped packets on the way" $?
        ;;
    delay)
        fault delay 5ms 2ms rate 1gbit reorder 10% 50%
        every_program "5 ms +- 2 ms each way, 10 % reordered"
        reordered=$(tc -s qdisc show dev "$b_netdev" | grep -c 'reorder 10%')
        [ "$reordered" = 1 ]
        check "netem delayed and reordered on the way" $?
        ;;
    corruption)
        fault corrupt 0.1%
        every_program "0.1 % corrupted each way"
        ;;
    short-partition)
        for program in pingpong blast; do
            if [ $program = pingpong ]; then pingpong -c 2000 -s 4096 -R 60000 >"$log/client" 2>&1 &
            else blast -m send -b 8 -s 4096 -c 20000 >"$log/client" 2>&1 & fi
            client=$!
            wait_for_traffic && kill -0 $client 2>/dev/null
            check "$program: running when the link went down" $?
            fault loss 100%
            sleep 2
            clear_faults
            wait $client
            status=$?  # before the message's $(...), which would overwrite $?
            check "$program across a 2 s partition: $(grep -E '^(pingpong|blast)-client: ' "$log/client" | tail -n 1)" $status
        done
        ;;
    long-partition)
        # -R: on iWARP only the application can notice (TCP retransmits for many minutes).
        pingpong -c 1000000000 -s 4096 -R 10000 >"$log/client" 2>&1 &
        client=$!
        wait_for_traffic
        check "the client's round trips under way" $?
        fault loss 100%
        started=$(date +%s)
        for _ in $(seq 600); do kill -0 $client 2>/dev/null || break; sleep 0.1; done
        if kill -0 $client 2>/dev/null; then
            check "the client gave up within 60 s of the partition" 1
            kill -9 $client
        fi
        wait $client
        status=$?
        error=$(grep -v "^connection [0-9]*: [0-9]* round trips" "$log/client" | grep -m1 -iE "error|echo|fail|timeout")
        echo "after $(( $(date +%s) - started )) s the client ended: $error"
        [ "$status" != 0 ] && [ -n "$error" ]
        check "a partition longer than the timeouts ends the connection with a clear error" $?
        clear_faults
        pingpong -c 100 -s 4096 >"$log/client" 2>&1
        status=$?
        check "once the link is back a new client is served: $(tail -n 1 "$log/client")" $status
        ;;
    *) echo "usage: $0 <build dir> loss|delay|corruption|short-partition|long-partition" >&2; exit 2 ;;
esac

clear_faults
# The servers are whole: each ends on SIGINT (no agent stuck) within 30 s.
for name in pingpong blast; do
    pkill -INT -f "$build/demos/$name-server -a $a "
done
pkill -INT -f "$build/demos/stream-bench --server --rdma $a "
for _ in $(seq 300); do [ -z "$(jobs -rp)" ] && break; sleep 0.1; done
[ -z "$(jobs -rp)" ]
status=$?
check "both servers ended on SIGINT: $(grep -h 'served' "$log/pingpong" "$log/blast" | cut -c1-100 | tr '\n' ';')" $status
[ "$failures" = 0 ]
