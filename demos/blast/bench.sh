#!/bin/bash
# bench.sh: one-way throughput of evrdma's blast against perftest in the same run on the same
# device, both over rdma_cm, same size, count and operations in flight: blast -m send vs
# ib_send_bw -e, -m write and -m write_imm vs ib_write_bw (perftest 4.5 has no events or
# immediate data for writes: it busy-polls), -m read vs ib_read_bw -e. Prints each figure and the
# ratio. Meant for tools/rdma-run (make bench).
#   bench.sh [size (65536)] [count (2000)] [in flight (16)]
set -u
case ${1:-} in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
size=${1:-65536} count=${2:-2000} depth=${3:-16}
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run} dev=${EVRDMA_RDMA_DEV:?}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
wait_for() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# perftest's figure in MB/s (10^6 bytes): its message rate (Mpps) times the size.
perftest() {  # tool, extra options
    local tool=$1; shift
    timeout 300 "$tool" -d "$dev" -R -s "$size" -n "$count" -t "$depth" "$@" >"$log/perf-server" 2>&1 &
    wait_for "$log/perf-server" "Waiting for client" || sleep 1
    timeout 300 "$tool" -d "$dev" -R -s "$size" -n "$count" -t "$depth" "$@" "$ip" >"$log/perf-client" 2>&1
    wait
    awk -v size="$size" '/#bytes/ { getline; printf "%.1f", $5 * 1e6 * size / 1e6 }' "$log/perf-client"
}

blast() {  # mode
    "$build/demos/blast-server" -a "$ip" -p 0 -e 1 >"$log/ours-server" 2>&1 &
    wait_for "$log/ours-server" listening
    local port
    port=$(sed -n 's/.* port \([0-9]*\)$/\1/p' "$log/ours-server" | head -n 1)
    "$build/demos/blast-client" -a "$ip" -p "$port" -m "$1" -s "$size" -c "$count" -b "$depth" -x >"$log/ours-client" 2>&1
    wait
    sed -n 's/^blast-client: .* completed; all connections: .*: \([0-9.]*\) MB\/s.*/\1/p' "$log/ours-client"
}

echo "one-way throughput, $count x $size B, $depth in flight, on $dev (MB/s = 10^6 bytes/s):"
printf "  %-10s %12s %-22s %12s %8s\n" mode evrdma perftest "" "ratio"
status=0
iwarp=0
ibv_devinfo -d "$dev" 2>/dev/null | grep -q "transport:.*iWARP" && iwarp=1
for mode in send write write_imm read; do
    case $mode in
        send) tool=ib_send_bw; extra=(-e) ;;
        write|write_imm) tool=ib_write_bw; extra=() ;;
        read) tool=ib_read_bw; extra=(-e) ;;
    esac
    if [ "$mode" = write_imm ] && [ "$iwarp" = 1 ]; then
        printf "  %-10s %12s\n" "$mode" "(iWARP has no immediate data)"
        continue
    fi
    theirs=$(perftest "$tool" "${extra[@]}")
    ours=$(blast "$mode")
    label="$tool${extra[*]:+ ${extra[*]}}"
    if [ -n "$theirs" ] && [ -n "$ours" ]; then
        awk -v m="$mode" -v o="$ours" -v t="$theirs" -v l="$label" \
            'BEGIN { printf "  %-10s %12.1f %-22s %12.1f %8.2f\n", m, o, l, t, (t > 0 ? o / t : 0) }'
        grep -E "^blast-client: cpu" "$log/ours-client" | sed 's/^blast-client: /             evrdma /'
    else
        echo "  $mode: a measurement failed:"; tail -n 5 "$log"/*
        status=1
    fi
done
exit $status
