#!/bin/bash
# agents.sh: N concurrent agents on one pingpong-server (one reactor thread), from P client
# processes that each open N/P connections and, once every process is established (so setup is
# timed alone, as cmtime's), do R verified round trips on each and hold them open until every
# process is done, so all N agents exist at once. Prints how many were established and
# verified, the server's memory per agent by category (heap, pinned, provider queues, RSS) at the
# most agents, the connect rate over time and the loop's longest stalls (the server's -l), and the
# setup time per connection against rdma-core's cmtime (same guest, same N: create id + resolve
# address + resolve route + create QP + connect). Meant for tools/rdma-run.
#   agents.sh [agents (10000)] [client processes (5)] [round trips (10)] [server options...]
#   (AGENTS_CLIENT_OPTIONS: more pingpong-client options, e.g. "-F 64"; AGENTS_HOLD_SECONDS: hold
#   them all open and idle this long more, printing the server's CPU and longest stall meanwhile:
#   with keepalive, "-K MS" in both the server options and AGENTS_CLIENT_OPTIONS; AGENTS_BUSY_SECONDS
#   (10; 0: none): then 1 % more connections ping-pong this long while all are held, and the same;
#   AGENTS_CMTIME=0: no cmtime run)
# With every agent held it also times a /metrics and an /agents scrape (the server's -H), and once
# the clients have gone and the server has closed every agent, it checks that the server's fds are
# back to their count after a warm-up client (exit 1 otherwise), and prints its pinned memory and
# RSS and the device's resources (`rdma res`) against that count: the shared receive queues and
# buffer slabs a peak grew are kept for the next one.
# With more local addresses (tools/rdma-run --addresses N: EVRDMA_RDMA_SOURCE_IPS) each client
# process spreads its connections over them and the test bed's own (pingpong-client -b): one
# address's local ports end near 28 000 connections. cmtime, from one address, makes at most 20 000.
set -u
case ${1:-} in -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${BUILD_DIR:-build}
agents=${1:-10000} processes=${2:-5} trips=${3:-10}
shift $(( $# < 3 ? $# : 3 ))
ip=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=${AGENTS_LOG_DIR:-$(mktemp -d)}
mkdir -p "$log"
trap 'kill $(jobs -p) 2>/dev/null; [ -n "${AGENTS_LOG_DIR:-}" ] || rm -rf "$log"' EXIT
wait_for() { for _ in $(seq "${3:-400}"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
ulimit -n 65536 2>/dev/null || true
per=$(( (agents + processes - 1) / processes ))
agents=$(( per * processes ))
# The soft device maps each queue pair's send queue and each CQ into its process: the server holds
# a mapping or so per agent, past Linux's default of 65 530 a process from about 60 000 agents.
maps_needed=$(( agents * 2 + 10000 ))
maps_allowed=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)
if [ "$maps_allowed" -lt "$maps_needed" ]; then
    if echo "$maps_needed" 2>/dev/null >/proc/sys/vm/max_map_count; then
        echo "agents: vm.max_map_count raised from $maps_allowed to $maps_needed (a mapping or two per agent)"
    else
        echo "agents: warning: vm.max_map_count is $maps_allowed; $agents agents may need $maps_needed (not root?)"
    fi
fi

# The kernel's memory (the soft device's queues, CQs, and the CM's ids: both ends live in this
# guest), from /proc/meminfo before the server starts and with every connection held.
meminfo_kib() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
kernel_before=("$(meminfo_kib Slab)" "$(meminfo_kib VmallocUsed)" "$(meminfo_kib MemAvailable)")
# -l: a line a second (the connect rate over time, the loop's stalls). -W 60000: in one emulated
# guest the client processes answer their first accepts late (64 each timed out at 10 s at 50 000).
"$build/demos/pingpong-server" -a "$ip" -p 7483 -x -l -W 60000 -H 0 "$@" >"$log/server" 2>&1 &
server=$!
wait_for "$log/server" listening || { echo "agents: the server did not start"; cat "$log/server"; exit 1; }
# What the server and the device hold after one warm-up client (its device open: its context, its
# completion channel, a spare CQ), before the agents (both ends live in this guest).
dev=${EVRDMA_RDMA_DEV:-?}
"$build/demos/pingpong-client" -a "$ip" -p 7483 -n 1 -c 1 -s 64 ${AGENTS_CLIENT_OPTIONS:-} >"$log/warm-up" 2>&1 ||
    { echo "agents: the warm-up client failed"; cat "$log/warm-up"; exit 1; }
wait_for "$log/server" "progress at .* 0 agents" 400 || true
snapshot() {
    local fds pinned res
    fds=$(ls /proc/$server/fd | wc -l)
    pinned=$(awk '/^VmPin/ { print $2 }' /proc/$server/status)
    res=$(rdma res show 2>/dev/null | grep " $dev:" | sed 's/^[0-9]*: [^:]*: //')
    echo "$fds|$pinned|$res"
}
before=$(snapshot)
rss_before=$(awk '/^VmRSS/ { print $2 }' /proc/$server/status)
started=$(date +%s.%N)
clients=()
for p in $(seq "$processes"); do
    "$build/demos/pingpong-client" -a "$ip" -p 7483 -n "$per" -c "$trips" -s 64 -v -k -W -x -C 300000 -R 120000 \
        ${EVRDMA_RDMA_SOURCE_IPS:+-b "$ip,$EVRDMA_RDMA_SOURCE_IPS"} ${AGENTS_CLIENT_OPTIONS:-} >"$log/client$p" 2>&1 &
    clients+=($!)
done
# Setup alone: each process waits with its round trips until every process is established.
for p in $(seq "$processes"); do
    wait_for "$log/client$p" "waiting for SIGUSR2" 12000
done
kill -USR2 "${clients[@]}"
held=0
for p in $(seq "$processes"); do
    wait_for "$log/client$p" "holding them open" 12000 && held=$((held + 1))
done
all_held=$(date +%s.%N)
kernel_held=("$(meminfo_kib Slab)" "$(meminfo_kib VmallocUsed)" "$(meminfo_kib MemAvailable)")
sleep 2  # the server samples its memory once a second
# Idle: every agent held, nothing sent but what keepalive sends (its -l lines from 2 s on, from
# the first second the loop stood still less than 50 ms: at 100 000 agents the server is still
# answering the last round trips some seconds after every client holds its connections).
hold=${AGENTS_HOLD_SECONDS:-0}
idle_from=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s + 1 }')
sleep "$hold"
idle_to=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s }')
# The server's figures over HTTP with every agent held (-H): a /metrics scrape, then /agents
# (every agent listed, a slice at a time), each timed from the request to the last byte, after an
# untimed first scrape; once the loop has settled (its last second's stall under 50 ms, at most
# 2 minutes: at 100 000 agents the round trips' burst holds it for seconds).
for _ in $(seq 240); do
    last_stall=$(tail -c 2000 "$log/server" | sed -n 's/^pingpong-server: progress at .*longest stall \([0-9]*\)[.][0-9]* ms.*/\1/p' | tail -n 1)
    [ -n "$last_stall" ] && [ "$last_stall" -lt 50 ] && break
    sleep 0.5
done
http_port=$(sed -n 's/^pingpong-server: figures on http 127.0.0.1:\([0-9]*\).*/\1/p' "$log/server" | head -n 1)
scrape_from=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s }')
scraped=$(python3 - "$http_port" <<'PY' 2>&1
import json, sys, time, urllib.request
port = sys.argv[1]
def get(path):
    began = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=600) as reply:
        body = reply.read()
    return body, (time.monotonic() - began) * 1000
get("/metrics")  # Python's own first-request set-up stays out of the figures
metrics, metrics_ms = get("/metrics")
agents, agents_ms = get("/agents")
print(f"/metrics {metrics_ms:.0f} ms ({len(metrics) / 1024:.0f} KiB), /agents {agents_ms:.0f} ms "
      f"({len(json.loads(agents))} agents listed, {len(agents) / 1048576:.1f} MiB)")
PY
)
scrape_to=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s + 1 }')
# 1 % more connections ping-pong while every agent is held (their rate, and the loop's stalls).
busy=${AGENTS_BUSY_SECONDS:-10} busy_n=$(( agents / 100 > 0 ? agents / 100 : 1 ))
if [ "$busy" != 0 ]; then
    "$build/demos/pingpong-client" -a "$ip" -p 7483 -n "$busy_n" -c 1000000000 -s 64 -R 120000 \
        ${EVRDMA_RDMA_SOURCE_IPS:+-b "$ip,$EVRDMA_RDMA_SOURCE_IPS"} ${AGENTS_CLIENT_OPTIONS:-} >"$log/busy" 2>&1 &
    busy_client=$!
    # Until the server holds them all (at most 2 minutes), or the client has given up.
    for _ in $(seq 240); do
        tail -c 2000 "$log/server" | grep -q "progress at .* $((agents + busy_n)) agents" && break
        kill -0 "$busy_client" 2>/dev/null || break
        sleep 0.5
    done
    busy_from=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s + 1 }')
    sleep "$busy"
    busy_to=$(awk -v a="$(date +%s.%N)" -v s="$started" 'BEGIN { printf "%d", a - s }')
    kill -0 "$busy_client" 2>/dev/null && busy_ran=1 || busy_ran=0
    kill -INT "$busy_client" 2>/dev/null; wait "$busy_client"
fi
kill -INT "${clients[@]}" 2>/dev/null
failed=0
for pid in "${clients[@]}"; do wait "$pid" || failed=$((failed + 1)); done
# The server closes what the clients left (its -l line says when none are left; at most 2 minutes:
# an agent whose client's disconnect was lost stays until then). Only the log's end is read: with
# -x it holds a line per agent.
for _ in $(seq 120); do
    [ "$(tail -c 300000 "$log/server" | sed -n 's/^pingpong-server: progress at [0-9]* s: \([0-9]*\) agents.*/\1/p' | tail -n 1)" = 0 ] && break
    sleep 1
done
# Back to idle: the agents' teardown done (the device's counts still for a second, at most 60 s).
last="" same=0
for _ in $(seq 600); do
    now=$(snapshot)
    if [ "$now" = "$last" ]; then same=$((same + 1)); [ $same -ge 10 ] && break; else same=0; last=$now; fi
    sleep 0.1
done
after=$(snapshot)
rss_after=$(awk '/^VmRSS/ { print $2 }' /proc/$server/status 2>/dev/null)
kill -INT $server; wait $server

completed=0 established=0 setup_us=0
for p in $(seq "$processes"); do
    c=$(sed -n 's/^pingpong-client: \([0-9]*\) connections completed their round trips, holding.*/\1/p' "$log/client$p")
    completed=$((completed + ${c:-0}))
    read -r e s < <(sed -n 's/^pingpong-client: connect: \([0-9]*\) of [0-9]* connections established \([0-9.]*\) s.*/\1 \2/p' "$log/client$p")
    established=$((established + ${e:-0}))
    setup_us=$(awk -v a="$setup_us" -v b="${s:-0}" 'BEGIN { print (b * 1e6 > a) ? b * 1e6 : a }')
done

# cmtime, same guest, the same number of connections (at most 20 000: it connects from one address;
# AGENTS_CMTIME=0 leaves it out).
cm_agents=$(( agents < 20000 ? agents : 20000 ))
: >"$log/cmtime"
if [ "${AGENTS_CMTIME:-1}" != 0 ]; then
    cmtime -b "$ip" -p 7484 -c "$cm_agents" >"$log/cmtime-server" 2>&1 &
    cmserver=$!
    sleep 1
    timeout 600 cmtime -s "$ip" -p 7484 -c "$cm_agents" >"$log/cmtime" 2>&1
    kill $cmserver 2>/dev/null; wait $cmserver 2>/dev/null
fi
cm_ms=$(awk -F'[:[:space:]]+' '/^(create id|resolve addr|resolve route|create qp|connect) *:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { sum += $i; break } } END { print sum + 0 }' "$log/cmtime")

echo "$agents concurrent agents on one pingpong-server ${*:+($*) }(one reactor thread), from $processes client processes of $per connections, $trips verified round trips of 64 B each:"
echo "  $established established, $completed completed their round trips (every byte verified) and were held open together; client processes failed: $failed"
sed -n 's/^pingpong-server: \(served .*\)/  server: \1/p; s/^pingpong-server: memory per agent/  server: memory per agent/p; s/^pingpong-server: \(shared receive queues.*\)/  server: \1/p' "$log/server"
awk -v n="$agents" -v slab=$((kernel_held[0] - kernel_before[0])) -v vm=$((kernel_held[1] - kernel_before[1])) \
    -v avail=$((kernel_before[2] - kernel_held[2])) -v driver="${EVRDMA_RDMA_DRIVER:-?}" 'BEGIN {
    printf "  kernel memory per connection (%s, both ends in this guest: two QPs, their share of CQs, two CM ids): slab %.1f KiB, vmalloc %.1f KiB; all memory in use (user too) %.1f KiB\n", driver, slab / n, vm / n, avail / n }'
awk -v ours="$setup_us" -v n="$agents" -v cm="$cm_ms" -v cmn="$cm_agents" 'BEGIN {
    printf "  setup, all %d connecting at once: evrdma %.0f ms (%.1f us per connection; the slowest of the %s processes)\n", n, ours / 1000, ours / n, "'"$processes"'"
    if (cm > 0) printf "                                  cmtime %.0f ms for %d (%.1f us per connection: create id .. connect, one process)\n  ratio evrdma / cmtime, per connection: %.2f\n", cm, cmn, cm * 1000 / cmn, (ours / n) / (cm * 1000 / cmn)
    else if ("'"${AGENTS_CMTIME:-1}"'" == "0") print "  cmtime not run (AGENTS_CMTIME=0)"
    else print "  cmtime did not finish" }'
# With the server's -l: the connect rate over time and the loop's longest stalls, from its lines a second.
if grep -q '^pingpong-server: progress' "$log/server"; then
    sed -n 's/^pingpong-server: progress at \([0-9]*\) s: \([0-9]*\) agents .*longest stall \([0-9.]*\) ms (the most CPU between two 10 ms ticks \([0-9.]*\) ms)/\1 \2 \3 \4/p' "$log/server" |
    awk -v n="$agents" '
        { t[NR] = $1; a[NR] = $2; stall[NR] = $3; cpu[NR] = $4; if ($2 > most && $2 <= n) { most = $2; at = NR } }
        END {
            if (NR == 0) exit
            for (i = 1; i <= NR && a[i] == 0; i++) ; first = i
            printf "  connect rate over time (server, agents held each second): "
            q = 1; prev_t = t[first] - 1; prev_a = 0
            for (i = first; i <= at; i++) if (a[i] >= q * most / 4 || i == at) {
                printf "%s%d%% at %d s (%.0f/s)", (q > 1 ? ", " : ""), 100 * a[i] / most, t[i] - t[first] + 1, (a[i] - prev_a) / (t[i] - prev_t)
                prev_t = t[i]; prev_a = a[i]; q++
                while (q <= 4 && a[i] >= q * most / 4) q++
            }
            printf "; most held %d\n", most
            for (i = first; i <= at; i++) { if (stall[i] > cs) cs = stall[i]; if (cpu[i] > cc) cc = cpu[i] }
            for (i = at + 1; i <= NR && a[i] == most; i++) { if (stall[i] > hs) hs = stall[i]; if (cpu[i] > hc) hc = cpu[i] }
            printf "  the loop'"'"'s longest stall while they connected %.0f ms (the most CPU between two 10 ms ticks %.0f ms); with all held (round trips, then idle) %.0f ms (%.0f ms)\n", cs, cc, hs, hc
            # The drain: from the line that first shows fewer to the first that shows none.
            for (d = at + 1; d <= NR && a[d] >= most; d++) ;
            for (e = d; e <= NR && a[e] > 0; e++) ;
            if (d <= NR && e <= NR) printf "  closing them all (every client interrupted at once): %d s, %.0f a second\n", t[e] - t[d - 1], most / (t[e] - t[d - 1])
            else if (d <= NR) printf "  closing them all (every client interrupted at once): %d closed, %d still open when the server was stopped %d s later (no disconnect reached it for them)\n", most - a[NR], a[NR], t[NR] - t[d - 1]
        }'
fi
scrape_stall=$(sed -n 's/^pingpong-server: progress at \([0-9]*\) s: .*longest stall \([0-9.]*\) ms.*/\1 \2/p' "$log/server" |
    awk -v from="$scrape_from" -v to="$scrape_to" '$1 >= from && $1 <= to && $2 > most { most = $2 } END { printf "%.0f", most }')
echo "  the server's figures over HTTP with all held: ${scraped:-not scraped} (the loop's longest stall in those seconds: $scrape_stall ms)"
if [ "$hold" != 0 ]; then
    sed -n 's/^pingpong-server: progress at \([0-9]*\) s: \([0-9]*\) agents .*cpu user \([0-9]*\)% system \([0-9]*\)%, the loop.s longest stall \([0-9.]*\) ms (the most CPU between two 10 ms ticks \([0-9.]*\) ms)/\1 \2 \3 \4 \5 \6/p' "$log/server" |
    awk -v from="$idle_from" -v to="$idle_to" -v opts="$*" '
        $1 >= from && !settled && $5 < 50 { settled = 1; skipped = $1 - from }
        settled && $1 <= to { n++; cpu += $3 + $4; if ($3 + $4 > most) most = $3 + $4; if ($5 > stall) stall = $5; if ($6 > used) used = $6; if (agents == 0 || $2 < agents) agents = $2 }
        END { if (n) printf "  idle with all held (%d agents at least), %d s from the first second the loop stood still less than 50 ms (%d s after the last client held them) (server options: %s): CPU %.1f%% of a core on average, %d%% in its busiest second; the loop'"'"'s longest stall %.1f ms (the most CPU between two 10 ms ticks %.1f ms)\n", agents, n, skipped, opts, cpu / n, most, stall, used }'
fi
if [ "$busy" != 0 ] && [ "$busy_ran" = 0 ]; then
    echo "  while $busy_n connections more ping-pong: their client ended early: $(tail -n 1 "$log/busy")"
elif [ "$busy" != 0 ]; then
    echo "$busy_n" "$busy_from" "$busy_to" | cat - <(sed -n 's/^pingpong-server: progress at \([0-9]*\) s: \([0-9]*\) agents .*cpu user \([0-9]*\)% system \([0-9]*\)%, the loop.s longest stall \([0-9.]*\) ms (the most CPU between two 10 ms ticks \([0-9.]*\) ms)/\1 \2 \3 \4 \5 \6/p' "$log/server") |
    awk 'NR == 1 { n = $1; from = $2; to = $3; next }
        $1 >= from && $1 <= to { k++; cpu += $3 + $4; if ($5 > stall) stall = $5; if ($6 > used) used = $6 }
        END { if (k) printf "  while %d connections more (1 %%) ping-pong, all held, %d s: CPU %.0f%% of a core on average; the loop'"'"'s longest stall %.1f ms (the most CPU between two 10 ms ticks %.1f ms)\n", n, k, cpu / k, stall, used
              else printf "  while %d connections more ping-pong: no progress line in those seconds\n", n }'
fi
IFS='|' read -r fds0 pin0 res0 <<<"$before"
IFS='|' read -r fds1 pin1 res1 <<<"$after"
echo "  once all were closed, against after a warm-up client: the server's fds $fds0 -> $fds1, pinned $pin0 -> $pin1 KiB, RSS ${rss_before:-?} -> ${rss_after:-?} KiB; the device: $res0 -> $res1"
if [ "$fds0" != "$fds1" ]; then
    echo "  FAIL: the server's fds did not return to their count before the agents"
    exit 1
fi
if [ "$completed" != "$agents" ] || [ "$failed" != 0 ]; then
    echo "  what the clients saw:"
    cat "$log"/client* | grep "^connection [0-9]*: [a-z]" | sed 's/^connection [0-9]*: //' | sort | uniq -c | sort -rn | head -n 5
    exit 1
fi
