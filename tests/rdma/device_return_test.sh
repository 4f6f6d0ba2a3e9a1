#!/bin/bash
# pingpong-server outlives its device: with its figures on (-x), it serves a client, loses the
# device (`rdma link delete`), listens again on the same port once the device is back, serves
# another client, and ends cleanly on SIGINT, printing its figures, which read the removed
# device's completion counters (a heap-use-after-free under ASan before the Reactor kept them).
# Needs the test bed's soft device (it deletes and re-adds it). (With workers, -w N, the removal
# can still wait for ever: README, Known limitations.)
#   device_return_test.sh <build dir>
set -u -o pipefail
build=$1
. "$(dirname "${BASH_SOURCE[0]}")/../lib/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
device=${EVRDMA_RDMA_DEV:?}
driver=${EVRDMA_RDMA_DRIVER:-}
case $driver in rxe|siw) ;; *) echo "FAILED: this test deletes and re-adds the device: it needs the test bed's soft device"; exit 1 ;; esac
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
failures=0
check() { if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi; }
wait_for() {  # wait_for <seconds> <command...>: until the command succeeds
    local limit=$1 _; shift
    for _ in $(seq $((limit * 10))); do "$@" && return 0; sleep 0.1; done
    "$@"
}

netdev=$(rdma link show "$device/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
[ -n "$netdev" ] || { echo "FAILED: no netdev for $device"; exit 1; }
# librdmacm only lets go of a removed device when it can list the devices, which fails with none
# left: a spare device lets the removal complete (as in device_removal_test.cpp).
if [ ! -e /sys/class/infiniband/evrdma_spare ]; then
    ip link add evrdma-spare type dummy && ip link set evrdma-spare up &&
        rdma link add evrdma_spare type "$driver" netdev evrdma-spare || { echo "FAILED: cannot add a spare device"; exit 1; }
fi

"$build/demos/pingpong-server" -a "$address" -p 0 -x >"$log/server" 2>&1 &
server=$!
port=$(listening_port "$log/server" $server)
[ -n "$port" ] || { echo "FAILED: the server did not start"; cat "$log/server"; exit 1; }

"$build/demos/pingpong-client" -a "$address" -p "$port" -c 10 -s 64 -v >"$log/first" 2>&1
check "a client before the removal: 10 round trips" $?

# The removal waits in the kernel, beyond any signal, until every process let go of the device:
# waited for here with a deadline, and ended (by the server's SIGKILL) if it never completes.
rdma link delete "$device" &
remover=$!
wait_for 60 eval '! kill -0 '"$remover"' 2>/dev/null'
removed=$?
check "rdma link delete $device completed (the server let go of the device)" $removed
if [ $removed != 0 ]; then
    echo "--- what is still held on the devices"; rdma res show 2>&1 | head; rdma res show cq 2>&1 | head; rdma res show pd 2>&1 | head; ls -l "/proc/$server/fd" | grep -i uverbs
    kill -KILL "$server"
    wait "$remover"
    rdma link add "$device" type "$driver" netdev "$netdev"
    echo "--- server log"; cat "$log/server"
    exit 1
fi
wait_for 30 grep -q "the device went away" "$log/server"
check "the server said it lost the device" $?

rdma link add "$device" type "$driver" netdev "$netdev"
check "$device added again" $?
wait_for 30 grep -qE "^pingpong-server: listening again on .* port $port$" "$log/server"
check "the server listens again on port $port" $?

"$build/demos/pingpong-client" -a "$address" -p "$port" -c 10 -s 64 -v >"$log/second" 2>&1
check "a client after the device came back: 10 round trips" $?

kill -INT "$server"
wait_for 60 eval '! kill -0 '"$server"' 2>/dev/null'
check "the server ended on SIGINT" $?
wait "$server"
status=$?
[ "$status" = 0 ]
check "its exit status is 0 (figures printed, no sanitizer report): $status" $?
grep -qE "ERROR: AddressSanitizer|runtime error" "$log/server" && check "no sanitizer report" 1
[ "$failures" = 0 ] || { echo "--- server log"; cat "$log/server"; echo "--- clients"; cat "$log/first" "$log/second"; }
[ "$failures" = 0 ]
