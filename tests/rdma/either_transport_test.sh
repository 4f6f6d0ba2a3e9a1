#!/bin/bash
# RDMA, else TCP, with the test bed's device present and removed (run under tools/rdma-run):
# either_transport_test (C) against a peer that takes both at one port, a TCP-only peer, an
# RDMA-only peer and nobody; then with the device deleted (`rdma link delete`), where the client
# falls back to TCP and a listener asked for both takes TCP alone; the device is added again. With
# it, an RDMA peer that never answers is left for TCP at the try's bound (red without the bound).
#   either_transport_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
device=${EVRDMA_RDMA_DEV:?}
driver=${EVRDMA_RDMA_DRIVER:-}
case $driver in rxe|siw) ;; *) echo "FAILED: this test deletes and re-adds the device: it needs the test bed's soft device"; exit 1 ;; esac
program=$build/tests/either_transport_test

"$program" present "$driver"
check "with the device: every case as expected" $?

if [ "$driver" = rxe ]; then
    # Port 0 taking both, where TCP holds the port the RDMA CM picks (RoCE's port spaces are apart):
    # the machine's local port range narrowed to 64 ports, every other one held by a TCP listener,
    # each of 10 listeners still listens (a pick TCP holds is made again; before, EADDRINUSE).
    range=/proc/sys/net/ipv4/ip_local_port_range
    old_range=$(cat "$range")
    at_exit "echo '$old_range' >$range"
    echo "41000 41063" >"$range"
    python3 - "$address" >"$log/held" 2>&1 <<'EOF' &
import socket, sys, time
held = []
for port in range(41000, 41064, 2):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((sys.argv[1], port)); s.listen(1); held.append(s)
    except OSError:
        s.close()
print("holding", len(held), flush=True)
time.sleep(3600)
EOF
    holder=$!
    for _ in $(seq 200); do grep -q holding "$log/held" && break; sleep 0.05; done
    "$program" crowded "$driver"
    status=$?  # (before the check's own $(...) sets $?)
    check "port 0 taking both, TCP holding every other port ($(cat "$log/held")): every listener listens" $status
    kill "$holder"
    echo "$old_range" >"$range"
fi

netdev=$(rdma link show "$device/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
[ -n "$netdev" ] || { echo "FAILED: no netdev for $device"; exit 1; }
# librdmacm only lets go of a removed device when it can list the devices, which fails with none
# left: a spare device keeps the list non-empty (as in device_removal_test.cpp).
if [ ! -e /sys/class/infiniband/evrdma_spare ]; then
    ip link add evrdma-spare type dummy && ip link set evrdma-spare up &&
        rdma link add evrdma_spare type "$driver" netdev evrdma-spare || { echo "FAILED: cannot add a spare device"; exit 1; }
fi
rdma link delete "$device"
check "$device deleted" $?
at_exit "rdma link add $device type $driver netdev $netdev 2>/dev/null"
"$program" removed
check "with the device removed: every case as expected" $?
rdma link add "$device" type "$driver" netdev "$netdev"
check "$device added again" $?
echo "$failures failed"
[ "$failures" = 0 ]
