#!/bin/bash
# A listener on port 0 listens whatever TCP holds: on iWARP an RDMA listener is a TCP listener
# too, and the port the RDMA CM picks from its own port space may be held by a TCP socket of this
# machine (rdma_listen: EADDRINUSE; seen in CI on siw while another test's TCP clients ran). With
# the machine's local port range narrowed to 64 ports and half of them held by TCP listeners,
# each of 20 pingpong-servers on port 0 in turn still listens (a pick that hits a held port is
# made again), on a port TCP does not hold. On RoCE the two port spaces are apart: every
# listener listens there too, on any port of the range. Runs alone (RUN_SERIAL): the port range is the machine's.
#   listen_port_pick_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
range=/proc/sys/net/ipv4/ip_local_port_range
low=40000 high=40063 servers=20
# Under the sanitizers (EVRDMA_STRESS=light, slow starts) 10: each pick lands on a held port with
# odds of one half on iWARP, so 10 still make one that must be made again all but surely.
[ "${EVRDMA_STRESS:-}" = light ] && servers=10

old_range=$(cat "$range") || { echo "FAILED: cannot read $range"; exit 1; }
at_exit "echo '$old_range' >$range"
echo "$low $high" >"$range" || { echo "FAILED: cannot narrow $range (not root?)"; exit 1; }

# Every other port of the range held by a TCP listener on the test bed's address. SO_REUSEADDR:
# a connection of an earlier test may have left a port of the range in TIME_WAIT, and without it
# that port cannot be bound (CI: EADDRINUSE). A port some socket really uses is left out and named;
# the ports held are written to $log/held-ports, and the checks below read that list.
python3 - "$address" "$low" "$high" "$log/held-ports" >"$log/held" 2>&1 <<'EOF' &
import socket, sys, time
address, low, high, listing = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
held, busy = [], []
for port in range(low, high + 1, 2):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address, port))
        s.listen(1)
        held.append(s)
    except OSError as e:
        busy.append("%d (%s)" % (port, e.strerror))
        s.close()
with open(listing, "w") as f:
    f.write(" ".join(str(s.getsockname()[1]) for s in held) + "\n")
print("holding", len(held), "; in use by another socket:", ", ".join(busy) or "none", flush=True)
time.sleep(3600)
EOF
for _ in $(seq 200); do grep -q holding "$log/held" && break; sleep 0.05; done
held_count=$(awk '/^holding/ {print $2}' "$log/held")
[ "${held_count:-0}" -ge 28 ]
status=$?  # (before the check's own $(...) sets $?)
check "a TCP listener holds every other port of $low-$high, all but a few another socket uses ($(cat "$log/held"))" $status
held_ports=" $(cat "$log/held-ports" 2>/dev/null) "

listened=0 on_held=0
for n in $(seq $servers); do
    "$build/demos/pingpong-server" -a "$address" -p 0 >"$log/server$n" 2>&1 &
    pid=$!
    port=$(listening_port "$log/server$n" $pid)
    if [ -n "$port" ]; then
        listened=$((listened + 1))
        case $held_ports in *" $port "*) on_held=$((on_held + 1)) ;; esac
    else
        echo "server $n did not listen:"; cat "$log/server$n"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
done
[ $listened = $servers ]
check "$listened of $servers listeners on port 0 listen (${EVRDMA_RDMA_DRIVER:-rdma})" $?
if [ "${EVRDMA_RDMA_DRIVER:-}" = siw ]; then
    [ $on_held = 0 ]
    check "none on a port a TCP listener holds ($on_held)" $?
else
    echo "($on_held on a port number TCP holds: RoCE's RDMA ports are not TCP's)"
fi
exit $((failures > 0))
