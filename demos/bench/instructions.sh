#!/bin/bash
# instructions.sh: instructions per round trip (callgrind), pingpong -P against raw-pingpong (the
# same ping-pong on bare verbs), client and server each measured on its own while the other runs
# natively: the library's own work per message, which wall-clock latency under this emulation
# follows but varies too much (10-20 % run to run) to show. Each figure is the difference between
# a run of N2 and one of N1 round trips over N2 - N1 (set-up and teardown cancel), the median of
# RUNS such pairs. Run it under tools/rdma-run (make instructions); needs valgrind (make deps).
#   instructions.sh [size in bytes (64)] [runs (3)]
# SERVER_ARGS adds options to pingpong-server (e.g. -C: echoes copied, for comparison).
# Then the same for the byte stream: stream-bench's 64 B ping-pong client, the same libevent
# program over TCP bufferevents and over evrdma's, with the instructions libevent itself ran
# (what any program that holds a real bufferevent pays per message, whatever carries the bytes)
# and evrdma's own (its library's code, inlined parts included): the share this project can cut.
set -u
case ${1:-} in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
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
in_object() {  # in_object <regex> <file>: the instructions a callgrind file counted in the code of
    # the objects (ob=) matching regex: each function's own cost lines, not the call lines' (a
    # calls= line's next line is the callee's inclusive cost, counted where the callee is).
    # callgrind_annotate's per-object sums are not used: it files some functions of a library
    # without symbols under another object (libevent's event loop once under libnl-route).
    awk -v object="$1" '/^ob=/ { ob = substr($0, 4) } /^calls=/ { skip = 1; next }
         /^[0-9+*-]/ { if (skip) { skip = 0; next } if (ob ~ object) n += $2 } END { printf "%d\n", n }' "$2"
}
# libevent's own code: any of its libraries (stream-bench links libevent-2.1.so for TLS, others
# libevent_core-2.1.so); libevrdma's, its inlined parts included.
in_libevent() { in_object '/libevent(_[a-z]+)?-[0-9.]+[.]so' "$1"; }
in_evrdma() { in_object 'libevrdma' "$1"; }
# One side under callgrind, the other native; $1: pingpong, raw, stream-tcp or stream-rdma, $2:
# client or server, $3: round trips. Prints the instructions, then libevent's and evrdma's with
# `libevent` as $4.
measure() {
    local kind=$1 side=$2 n=$3 out="$log/cg.$1.$2.$3"
    local server client prefix=()
    case $kind in
        pingpong) server=("$build/demos/pingpong-server" -a "$a" -p 0 -e 1 -P 100 ${SERVER_ARGS:-}) ;;
        raw) server=("$build/demos/raw-pingpong" -S -a "$a" -p 0) ;;
        stream-*) server=("$build/demos/stream-bench" --server "--${kind#stream-}" "$a" 0) ;;
    esac
    if [ "$side" = server ]; then server=("${grind[@]}" --callgrind-out-file="$out" "${server[@]}"); fi
    if [ "$side" = client ]; then prefix=("${grind[@]}" --callgrind-out-file="$out"); fi
    "${server[@]}" >"$log/server" 2>&1 &
    local pid=$! port="" _
    for _ in $(seq 1200); do  # valgrind starts slowly under emulation: up to 60 s
        port=$(sed -n 's/.* port \([0-9]*\)$/\1/p' "$log/server" | head -n 1)
        [ -n "$port" ] || ! kill -0 "$pid" 2>/dev/null && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "instructions.sh: $kind server did not listen" >&2; cat "$log/server" >&2; return 1; }
    case $kind in
        pingpong) client=("$build/demos/pingpong-client" -a "$a" -p "$port" -c "$n" -s "$size" -P 100 -R 0) ;;
        raw) client=("$build/demos/raw-pingpong" -a "$a" -p "$port" -c "$n" -s "$size") ;;
        stream-*) client=("$build/demos/stream-bench" "--${kind#stream-}" "$a" "$port" --latency --size "$size" --count "$n") ;;
    esac
    "${prefix[@]}" "${client[@]}" >"$log/client" 2>&1 || { echo "instructions.sh: $kind client failed" >&2; cat "$log/client" >&2; return 1; }
    if [ "${kind#stream-}" != "$kind" ]; then
        kill -INT "$pid"  # stream-bench's server serves runs until SIGINT
        wait "$pid"
    else
        wait "$pid" || { echo "instructions.sh: $kind server failed" >&2; cat "$log/server" >&2; return 1; }
    fi
    if [ "${4:-}" = libevent ]; then echo "$(total "$out") $(in_libevent "$out") $(in_evrdma "$out")"; else total "$out"; fi
}
per_trip() {  # median over runs of (I(n2) - I(n1)) / (n2 - n1); with `libevent` as $3, "all libevent evrdma" (the run whose all is the median)
    local kind=$1 side=$2 r a1 l1 e1 a2 l2 e2 values=()
    for ((r = 0; r < runs; r++)); do
        read -r a1 l1 e1 < <(measure "$kind" "$side" $n1 ${3:-}) && read -r a2 l2 e2 < <(measure "$kind" "$side" $n2 ${3:-}) &&
            [ -n "$a1" ] && [ -n "$a2" ] || return 1
        values+=("$(((a2 - a1) / (n2 - n1)))${3:+ $(((l2 - l1) / (n2 - n1))) $(((e2 - e1) / (n2 - n1)))}")
    done
    printf '%s\n' "${values[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p"
}

echo "instructions per round trip (callgrind), $size B, pingpong -P 100 against raw-pingpong; median of $runs"
printf '  %-8s %10s %10s %7s %10s\n' side pingpong raw ratio "evrdma's"
for side in client server; do
    p=$(per_trip pingpong $side libevent) && r=$(per_trip raw $side) || exit 1
    read -r p _ own <<<"$p"
    printf '  %-8s %10s %10s %7s %10s\n' "$side" "$p" "$r" "$(awk -v p="$p" -v r="$r" 'BEGIN { printf "%.2f", p / r }')" "$own"
done

echo "the byte stream: stream-bench's ping-pong client ($size B), instructions per round trip: all, libevent's, evrdma's own"
printf '  %-22s %10s %10s %10s\n' carried-by all libevent "evrdma's"
for kind in stream-tcp stream-rdma; do
    f=$(per_trip $kind client libevent) || exit 1
    read -r all ev own <<<"$f"
    printf '  %-22s %10s %10s %10s\n' "$([ $kind = stream-tcp ] && echo "TCP bufferevents" || echo "evrdma's bufferevents")" "$all" "$ev" "$own"
done
