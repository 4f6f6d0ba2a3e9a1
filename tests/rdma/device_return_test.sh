#!/bin/bash
# pingpong-server outlives its device: with its figures on (-x), it serves a client, loses the
# device (`rdma link delete`), listens again on the same port once the device is back, serves
# another client, and ends cleanly on SIGINT, printing its figures, which read the removed
# device's completion counters (a heap-use-after-free under ASan before the Reactor kept them).
# With workers (-w N) the agents' CQs, channel and PD live on other threads than the listener's
# id: librdmacm must not close the device before they are gone, or the removal waits for ever
# (it did in about 1 run in 3 before DeviceUsers): so that case goes through several removals.
# Needs the test bed's soft device (it deletes and re-adds it).
#   device_return_test.sh <build dir> [workers [removals]]
set -u -o pipefail
build=$1
workers=${2:-0}
removals=${3:-1}
. "$(dirname "${BASH_SOURCE[0]}")/../lib/script_test.sh"
device=${EVRDMA_RDMA_DEV:?}
driver=${EVRDMA_RDMA_DRIVER:-}
case $driver in rxe|siw) ;; *) echo "FAILED: this test deletes and re-adds the device: it needs the test bed's soft device"; exit 1 ;; esac
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

"$build/demos/pingpong-server" -a "$address" -p 0 -x -w "$workers" >"$log/server" 2>&1 &
server=$!
port=$(listening_port "$log/server" $server)
[ -n "$port" ] || { echo "FAILED: the server did not start"; cat "$log/server"; exit 1; }
echo "pingpong-server with $workers workers on port $port: $removals removal(s)"

"$build/demos/pingpong-client" -a "$address" -p "$port" -n 4 -c 10 -s 64 -v >"$log/first" 2>&1
check "4 connections before the removal (on every worker): 10 round trips each" $?

for round in $(seq "$removals"); do
    # The removal waits in the kernel, beyond any signal, until every process let go of the
    # device: waited for here with a deadline, and ended (by the server's SIGKILL) if it never
    # completes.
    rdma link delete "$device" &
    remover=$!
    wait_for 60 eval '! kill -0 '"$remover"' 2>/dev/null'
    removed=$?
    check "removal $round: rdma link delete $device completed (the server let go of the device)" $removed
    if [ $removed != 0 ]; then
        echo "--- what the server still holds"; ls -l "/proc/$server/fd" | grep -E "uverbs|infinibandevent"
        echo "--- where the removal waits"; cat "/proc/$remover/stack" 2>/dev/null
        kill -KILL "$server"
        wait "$remover"
        rdma link add "$device" type "$driver" netdev "$netdev"
        echo "--- server log"; cat "$log/server"
        exit 1
    fi
    wait_for 30 eval '[ "$(grep -c "the device went away" "$log/server")" -ge '"$round"' ]'
    check "removal $round: the server said it lost the device" $?

    rdma link add "$device" type "$driver" netdev "$netdev"
    check "removal $round: $device added again" $?
    wait_for 30 eval '[ "$(grep -cE "^pingpong-server: listening again on .* port '"$port"'$" "$log/server")" -ge '"$round"' ]'
    check "removal $round: the server listens again on port $port" $?

    "$build/demos/pingpong-client" -a "$address" -p "$port" -n 4 -c 10 -s 64 -v >"$log/second" 2>&1
    check "removal $round: 4 connections after the device came back: 10 round trips each" $?
done

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
