#!/bin/bash
# faulty_link.sh: pingpong's round trip and blast's throughput across the test bed's link (run
# under tools/rdma-run --link; make link-bench), on a clean link and under each fault netem puts on
# both ends: 1 % loss, 5 ms +- 2 ms delay with 10 % reordered, 0.1 % corruption. Prints figures and
# each against the clean link; nothing is asserted.
#   faulty_link.sh [round trips (300)] [blast operations (3000)]
set -u
case ${1:-} in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/servers.sh"
trips=${1:-300} ops=${2:-3000}
a=${EVRDMA_LINK_A_IP:?run this under tools/rdma-run --link}
ends="$EVRDMA_LINK_A_NETDEV $EVRDMA_LINK_B_NETDEV"
log=$(mktemp -d)
clear_faults() { for end in $ends; do tc qdisc del dev "$end" root 2>/dev/null; done; }
trap 'clear_faults; kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
modes="send write read"
"$build/demos/pingpong-server" -a "$a" -p 0 >"$log/pp" 2>&1 &
"$build/demos/blast-server" -a "$a" -p 0 >"$log/bl" 2>&1 &
pp_port=$(listening_port "$log/pp") bl_port=$(listening_port "$log/bl")

rtt() {  # microseconds per round trip, 4 KiB
    "$build/demos/pingpong-client" -a "$a" -p "$pp_port" -c "$trips" -s 4096 -v -x 2>&1 |
        sed -n 's/^connection 0: .* \([0-9.]*\) us per round trip.*/\1/p' | head -n 1
}
throughput() {  # MB/s, 8 x 4 KiB in flight
    "$build/demos/blast-client" -a "$a" -p "$bl_port" -m "$1" -b 8 -s 4096 -c "$ops" -v 2>&1 |
        sed -n 's/.*all connections: .* s: \([0-9.]*\) MB\/s.*/\1/p' | head -n 1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }

echo "across the link ($EVRDMA_RDMA_DRIVER, $EVRDMA_LINK_B_IP -> $EVRDMA_LINK_A_IP): pingpong $trips x 4 KiB, blast $ops x 4 KiB (8 in flight), each under netem on both ends"
printf "  %-42s %9s %6s" "fault" "RTT us" "x"
for mode in $modes; do printf " %9s %6s" "$mode MB/s" "x"; done
echo
declare -A clean
for fault in "none" "loss 1%" "delay 5ms 2ms rate 1gbit reorder 10% 50%" "corrupt 0.1%"; do
    clear_faults
    # shellcheck disable=SC2086
    [ "$fault" = none ] || for end in $ends; do tc qdisc add dev "$end" root netem $fault; done
    value=$(rtt)
    [ "$fault" = none ] && clean[rtt]=$value
    printf "  %-42s %9s %6s" "$fault" "${value:-failed}" "$(ratio "$value" "${clean[rtt]}")"
    for mode in $modes; do
        value=$(throughput "$mode")
        [ "$fault" = none ] && clean[$mode]=$value
        printf " %9s %6s" "${value:-failed}" "$(ratio "$value" "${clean[$mode]}")"
    done
    echo
done
echo "  (x: against the clean link; RTT higher is worse, MB/s lower is worse)"
