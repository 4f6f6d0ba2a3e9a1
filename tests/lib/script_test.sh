# Sourced first by the script tests that run in the test bed (tools/rdma-run): what they all begin
# with, and servers.sh's helpers (listening_port, hold_then_release). It sets
#   address   the test bed's RDMA address (outside the test bed the script ends, saying how to run it)
#   log       a directory for the output of the servers and clients, removed at exit
#   failures  0, counted by check <what> <status>: prints "ok: what" or "FAILED: what (status N)"
# and at exit kills the background jobs still running; at_exit <command> runs a command first.
. "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
address=${EVRDMA_RDMA_IP:?run this under tools/rdma-run}
log=$(mktemp -d)
failures=0
check() { if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAILED: $1 (status $2)"; failures=$((failures + 1)); fi; }
exit_commands=()
at_exit() { exit_commands+=("$*"); }
end_script_test() {
    local command
    for command in "${exit_commands[@]}"; do eval "$command"; done
    kill $(jobs -p) 2>/dev/null
    rm -rf "$log"
}
trap end_script_test EXIT
