#!/bin/bash
# The runner's contract, checked for real (each case boots its own guest):
#   - the command's exit status comes back exactly;
#   - a test that fails inside the guest turns the run red (the canary ctest label);
#   - bad usage is a test-bed failure (125), distinct from any command's status;
#   - the hard time limit ends a hung command with 124;
#   - a boot that does not reach the guest's init in time is tried once more, then is a test-bed
#     failure (125): shown with a deadline (200 ms) no boot meets.
# usage: runner_test.sh <path to rdma-run> <build dir>
set -u
runner=$1 build=$2
failures=0
check() {  # check <description> <expected status> <actual status>
    if [ "$2" = "$3" ]; then echo "ok: $1 (status $3)"; else echo "FAILED: $1: expected status $2, got $3"; failures=$((failures + 1)); fi
}

"$runner" -- sh -c 'exit 3'
check "the command's own exit status comes back" 3 $?

"$runner" --definitely-not-an-option -- true 2>/dev/null
check "bad usage is a test-bed failure" 125 $?

out=$("$runner" -- ctest --test-dir "$build" -L canary --output-on-failure 2>&1)
status=$?
echo "$out" | tail -n 5
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$status" -ne 125 ]
check "a test failing inside the guest fails the run (ctest status $status)" 0 $?
echo "$out" | grep -q "FailsInsideTheTestBedOnPurpose" && echo "$out" | grep -q "deliberate failure on"
check "the failure really happened in the guest, on its device" 0 $?

"$runner" --timeout 20 -- sleep 600 2>/dev/null
check "a hung command is ended by the time limit" 124 $?

err=$(EVRDMA_BOOT_DEADLINE_MS=200 "$runner" --vm -- true 2>&1 >/dev/null)
status=$?
echo "$err" | grep "boot"
check "a boot that never reaches init is a test-bed failure after one more try" 125 $status
echo "$err" | grep -q "booting it again" && echo "$err" | grep -q "hung twice"
check "the retry and the end are both said" 0 $?

echo "runner checks failed: $failures"
exit $((failures > 0))
