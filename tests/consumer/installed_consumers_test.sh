#!/bin/bash
# Runs what install_test.sh built against the installed evrdma (label `rdma`): each consumer
# checks 200 echoes over the test bed's RDMA device, the README's example gets its echo from a
# pingpong-server, and the README's C example's client its echo from its server.
#   usage: installed_consumers_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
bin=$build/consumers/bin
[ -x "$bin/consumer-pkg-config" ] || { echo "installed_consumers_test: $bin is empty: run the install test first (ctest -L install)" >&2; exit 1; }
: "${EVRDMA_RDMA_IP:?run under tools/rdma-run}"
# The packages this test installs in the guest (below) are removed again at its end; a run cut
# short may have left them, and a libevrdma.so in the system's path would make the no-rpath
# consumer start (a second run of the label in one guest boot: make test-repeat).
remove_packages() {
    if [ "${EVRDMA_TESTBED:-}" = vm ] && dpkg -s libevrdma >/dev/null 2>&1; then
        dpkg -r libevrdma-dev libevrdma >/dev/null
    fi
}
remove_packages
for consumer in consumer-find-package consumer-find-package-static consumer-pkg-config consumer-add-subdirectory; do
    echo "--- $consumer"
    timeout 60 "$bin/$consumer" "$EVRDMA_RDMA_IP" 200
done
echo "--- consumer-pkg-config-no-rpath: linked as the README warns against"
if out=$("$bin/consumer-pkg-config-no-rpath" "$EVRDMA_RDMA_IP" 1 2>&1); then
    echo "installed_consumers_test: a program linked without the rpath found libevrdma.so anyway: the README's warning is wrong" >&2
    exit 1
fi
grep -q "libevrdma.so.*cannot open shared object file" <<<"$out" ||
    { echo "installed_consumers_test: without the rpath it failed otherwise: $out" >&2; exit 1; }
echo "fails to start as the README says; with LD_LIBRARY_PATH, as the README says, it runs:"
LD_LIBRARY_PATH=$(cat "$bin/libdir") timeout 60 "$bin/consumer-pkg-config-no-rpath" "$EVRDMA_RDMA_IP" 200
echo "--- readme-example against pingpong-server"
port=17771
"$build/demos/pingpong-server" -a "$EVRDMA_RDMA_IP" -p "$port" -e 1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    out=$(timeout 30 "$bin/readme-example" "$EVRDMA_RDMA_IP" "$port" 2>&1) && break
    sleep 0.2  # the server may not listen yet
done
echo "$out"
[ "$out" = "echo: hello" ] || { echo "installed_consumers_test: the README's example printed '$out'" >&2; exit 1; }
wait $server
echo "--- the README's C example, its server and its client"
"$bin/readme-example-c" --listen "$EVRDMA_RDMA_IP" 0 >"$build/consumers/c-example-server.log" 2>&1 &
server=$!
for _ in $(seq 200); do
    port=$(sed -n 's/.* port \([0-9]*\)$/\1/p' "$build/consumers/c-example-server.log")
    [ -n "$port" ] && break
    sleep 0.05
done
out=$(timeout 30 "$bin/readme-example-c" "$EVRDMA_RDMA_IP" "$port" 2>&1) || true
echo "$out"
[ "$out" = "echo: hello" ] || { echo "installed_consumers_test: the README's C example printed '$out'" >&2; exit 1; }
kill -INT $server
wait $server
echo "--- the Debian packages"
if [ "${EVRDMA_TESTBED:-}" = vm ]; then
    # The guest's root file system is a throw-away layer: install the packages for real there.
    dpkg -i "$build"/consumers/packages/libevrdma_*.deb "$build"/consumers/packages/libevrdma-dev_*.deb
    [ "$(pkg-config --modversion evrdma)" = "$(dpkg-deb -f "$build"/consumers/packages/libevrdma_*.deb Version)" ] ||
        { echo "installed_consumers_test: pkg-config does not find the installed evrdma" >&2; exit 1; }
    timeout 60 "$bin/consumer-deb" "$EVRDMA_RDMA_IP" 200  # finds libevrdma.so.* where the package put it
    installed=$(dpkg -L libevrdma | grep 'libevrdma\.so')
    remove_packages
    for f in $installed; do
        [ ! -e "$f" ] || { echo "installed_consumers_test: $f is still there after dpkg -r" >&2; exit 1; }
    done
else
    LD_LIBRARY_PATH=$build/consumers/deb-root/usr/lib timeout 60 "$bin/consumer-deb" "$EVRDMA_RDMA_IP" 200
fi
echo "installed_consumers_test: every consumer ran over RDMA"
