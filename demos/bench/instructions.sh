#!/bin/bash
# instructions.sh: instructions per round trip (callgrind), pingpong -P against raw-pingpong (the
# same ping-pong on bare verbs), client and server each measured on its own while the other runs
# natively: the library's own work per message, which wall-clock latency under this emulation
# follows but varies too much (10-20 % run to run) to show. Each figure is the difference between
# a run of N2 and one of N1 round trips over N2 - N1 (set-up and teardown cancel), the median of
# RUNS such pairs. Run it under tools/rdma-run (make instructions); needs valgrind (make deps).
#   instructions.sh [size in bytes (64)] [runs (3)]
# SERVER_ARGS adds options to pingpong-server (e.g. -C: echoes copied, for comparison).
set -u
case ${1:-} in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
size=${1:-64} runs=${2:-3} n1=2000 n2=6000
a=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is missing (make deps)" >&2; exit 1; }
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
grind=(valgrind --tool=callgrind --dump-instr=no --compress-strings=no)

total() {  # the instructions a callgrind file counted
    sed -n 's/^summary: \([0-9]*\).*/\1/p;s/^totals: \([0-9]*\).*/\1/p' "$1" | head -n 1
}
# One side under callgrind, the other native; $1: pingpong or raw, $2: client or server, $3: round trips.
measure() {
    local kind=$1 side=$2 n=$3 out="$log/cg.$1.$2.$3"
    local server client
    if [ "$kind" = pingpong ]; then
        server=("$build/demos/pingpong-server" -a "$a" -p 0 -e 1 -P 100 ${SERVER_ARGS:-})
        client=("$build/demos/pingpong-client" -a "$a" -c "$n" -s "$size" -P 100 -R 0)
    else
        server=("$build/demos/raw-pingpong" -S -a "$a" -p 0)
        client=("$build/demos/raw-pingpong" -a "$a" -c "$n" -s "$size")
    fi
    if [ "$side" = server ]; then server=("${grind[@]}" --callgrind-out-file="$out" "${server[@]}"); fi
    if [ "$side" = client ]; then client=("${grind[@]}" --callgrind-out-file="$out" "${client[@]}"); fi
    "${server[@]}" >"$log/server" 2>&1 &
    local pid=$! port="" _
    for _ in $(seq 1200); do  # valgrind starts slowly under emulation: up to 60 s
        port=$(sed -n 's/.* port \([0-9]*\)$/\1/p' "$log/server" | head -n 1)
        [ -n "$port" ] || ! kill -0 "$pid" 2>/dev/null && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "instructions.sh: $kind server did not listen" >&2; cat "$log/server" >&2; return 1; }
    "${client[@]}" -p "$port" >"$log/client" 2>&1 || { echo "instructions.sh: $kind client failed" >&2; cat "$log/client" >&2; return 1; }
    wait "$pid" || { echo "instructions.sh: $kind server failed" >&2; cat "$log/server" >&2; return 1; }
    total "$out"
}
per_trip() {  # median over runs of (I(n2) - I(n1)) / (n2 - n1)
    local kind=$1 side=$2 r i1 i2 values=()
    for ((r = 0; r < runs; r++)); do
        i1=$(measure "$kind" "$side" $n1) && i2=$(measure "$kind" "$side" $n2) || return 1
        values+=($(((i2 - i1) / (n2 - n1))))
    done
    printf '%s\n' "${values[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p"
}

echo "instructions per round trip (callgrind), $size B, pingpong -P 100 against raw-pingpong; median of $runs"
printf '  %-8s %10s %10s %7s\n' side pingpong raw ratio
for side in client server; do
    p=$(per_trip pingpong $side) && r=$(per_trip raw $side) || exit 1
    printf '  %-8s %10s %10s %7s\n' "$side" "$p" "$r" "$(awk -v p="$p" -v r="$r" 'BEGIN { printf "%.2f", p / r }')"
done
