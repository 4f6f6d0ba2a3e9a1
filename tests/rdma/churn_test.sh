#!/bin/bash
# 1000 connect / verified round trip / disconnect cycles against one pingpong-server: every cycle
# completes, and the server's fds and pinned memory and the device's resources return to their
# idle counts (demos/scale/churn.sh asserts it; `make scale` runs 10 000).
# On siw 1 at a time: with 8 at a time, siw's rdma_create_qp fails with ENOMEM after some hundreds
# of connections in one process (README, Known limitations).
set -u
here=$(cd "$(dirname "$0")" && pwd)
export BUILD_DIR=${1:?usage: churn_test.sh BUILD_DIR}
at_once=8
[ "${EVRDMA_RDMA_DRIVER:-}" = siw ] && at_once=1
exec "$here/../../demos/scale/churn.sh" 1000 "$at_once"
