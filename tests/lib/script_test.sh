# Sourced first by the script tests that run in the test bed (tools/rdma-run): what they all begin
# with, and servers.sh's helpers (listening_port, hold_then_release). It sets
#   address   the test bed's RDMA address (outside the test bed the script ends, saying how to run it)
#   log       a directory for the output of the servers and clients, removed at exit
#   failures  0, counted by check <what> <status>: prints "ok: what" or "FAILED: what (status N)"
# and at exit kills the background jobs still running; at_exit <command> runs a command first.
# A well-behaved client served alongside an attack: run_alongside <name> <command...> & runs the
# command again and again until check_alongside <name...> stops them and checks that each ran at
# least once and never failed (a failed run's status and first lines are shown).
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
run_alongside() {
    local name=$1 runs=0 failed=0 status; shift
    while [ ! -e "$log/stop-alongside" ]; do
        if "$@" >"$log/alongside-$name.out" 2>&1; then
            runs=$((runs + 1))
        else
            status=$? failed=$((failed + 1))
            { echo "$name exit status $status"; cat "$log/alongside-$name.out"; } >"$log/alongside-$name.failed"
        fi
    done
    # Written aside and renamed: the waiting reader sees the whole count or no file (the file a
    # redirect creates is empty until the echo, and a read then saw "0 runs, 1 failed").
    echo "$runs $failed" >"$log/alongside-$name.partial" && mv "$log/alongside-$name.partial" "$log/alongside-$name"
}
check_alongside() {
    local name runs failed _
    touch "$log/stop-alongside"
    for name in "$@"; do
        for _ in $(seq 600); do [ -e "$log/alongside-$name" ] && break; sleep 0.1; done  # its run in progress ends
        read -r runs failed <"$log/alongside-$name" 2>/dev/null || { runs=0 failed="? (no count written)"; }
        [ "$runs" -ge 1 ] && [ "$failed" = 0 ]
        check "the well-behaved $name client alongside: $runs runs, $failed failed" $?
        [ -e "$log/alongside-$name.failed" ] && head -n 4 "$log/alongside-$name.failed"
    done
    return 0
}
