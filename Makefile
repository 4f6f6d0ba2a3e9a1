# A thin wrapper around CMake and the tools in tools/. Everything here works on a fresh Debian 12
# machine after `make deps`.
BUILD_DIR ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RDMA_RUN ?= tools/rdma-run

.PHONY: all deps build install deb test check test-repeat test-asan test-valgrind fuzz demo bench instructions link-bench scale docs clean

all: build

deps:
	tools/install-deps

build:
	cmake -S . -B $(BUILD_DIR) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

# Installs the library (shared and static), its public headers, the CMake package and evrdma.pc
# under PREFIX (use sudo for a system prefix).
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# Debian packages libevrdma and libevrdma-dev (CPack) in $(BUILD_DIR)/packages.
deb: build
	cd $(BUILD_DIR) && cpack -B packages

test:
	BUILD_DIR=$(BUILD_DIR) tools/run-tests

# Before you push: the build, the unit and install tests, and the rdma label on rxe (one guest boot).
check:
	CHECK_ONLY=1 BUILD_DIR=$(BUILD_DIR) tools/run-tests

# The rdma label again and again in one guest boot until a test fails (ctest --repeat
# until-fail:N): N (default 5) times on DRIVER (rxe or siw), from the ASan build with ASAN=1.
N ?= 5
DRIVER ?= rxe
ASAN ?= 0
test-repeat:
	REPEAT=$(N) REPEAT_DRIVER=$(DRIVER) REPEAT_ASAN=$(ASAN) BUILD_DIR=$(BUILD_DIR) tools/run-tests

# The whole suite under AddressSanitizer and UBSan alone ($(BUILD_DIR)-asan): unit on the host, the
# rdma and link labels in the test bed on rxe and siw; fails on any report. (make test runs it too.)
test-asan:
	ASAN_ONLY=1 BUILD_DIR=$(BUILD_DIR) tools/run-tests

# Each rdma test program under valgrind's memcheck in the test bed, on rxe (VALGRIND_DRIVERS="rxe siw"
# for both); fails on any error or leak but what librdmacm and libibverbs keep for themselves
# (tests/valgrind/rdma-core.supp). (make test runs it too.)
test-valgrind:
	VALGRIND_ONLY=1 BUILD_DIR=$(BUILD_DIR) tools/run-tests

# libFuzzer on every parser of what a peer sends (tests/fuzz), FUZZ_SECONDS per target, under ASan
# and UBSan. The corpus grows in $(BUILD_DIR)-fuzz/corpus from run to run; an input that breaks
# a target is kept in $(BUILD_DIR)-fuzz/fuzz-artifacts. (make test runs each for 20 s.)
FUZZ_SECONDS ?= 600
fuzz:
	cmake -S . -B $(BUILD_DIR)-fuzz -DCMAKE_CXX_COMPILER=clang++ -DEVRDMA_FUZZ=ON >/dev/null
	cmake --build $(BUILD_DIR)-fuzz -j$(JOBS) --target evrdma_fuzzers
	EVRDMA_FUZZ_SECONDS=$(FUZZ_SECONDS) EVRDMA_FUZZ_CORPUS=$(abspath $(BUILD_DIR)-fuzz)/corpus \
	    ctest --test-dir $(BUILD_DIR)-fuzz -L '^fuzz$$' -j$(JOBS) -V

# The main demo: a pingpong server and 16 concurrent clients over real RDMA in the test bed,
# every byte verified, figures per client and in all.
demo: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -- demos/pingpong/demo.sh 16 500 4096

# evrdma against perftest, measured in the same test-bed run, each figure the median of 3 runs
# (5 for latency up to 4 KiB) taken in turn (demos/bench/bench.py): round-trip latency from 1 B to 1 MiB (pingpong vs
# ib_send_lat, event mode and adaptive polling), one-way throughput per mode (blast vs ib_send_bw
# -e / ib_write_bw / ib_read_bw -e), message rate at 8 B-4 KiB unbatched and in lists of 16, the
# CPU of an idle open connection, byte streams (stream-bench vs rstream: throughput with 64 B-64 KiB
# writes, CPU per GB, 64 B ping-pong; TCP as a reference), then how an application's own timer and HTTP server fare on the
# loop while RDMA floods it (evrdma-loop-latency). CSV files, summary.txt, loop-latency.txt and SVG
# pictures (gnuplot, from make deps) go to BENCH_OUT.
BENCH_OUT ?= $(BUILD_DIR)/bench
bench: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -t 3000 -- sh -c '/usr/bin/python3 demos/bench/bench.py --out "$(BENCH_OUT)" && echo && $(BUILD_DIR)/demos/evrdma-loop-latency -a "$$EVRDMA_RDMA_IP" -d 3 >"$(BENCH_OUT)/loop-latency.txt" && cat "$(BENCH_OUT)/loop-latency.txt"'
	gnuplot -e "dir='$(BENCH_OUT)'" demos/bench/plot.gp && echo "bench: pictures in $(BENCH_OUT)/latency.svg, bandwidth.svg, rate.svg, streams.svg"

# The library's own work per message: callgrind's instructions per round trip of pingpong -P
# against raw-pingpong's, client and server, at 64 B; then stream-bench's client over TCP and
# over RDMA, with libevent's share and evrdma's own (demos/bench/instructions.sh; valgrind).
instructions: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -t 1800 -- demos/bench/instructions.sh 64 3

# Across a faulty link (tools/rdma-run --link): pingpong's round trip and blast's throughput on a
# clean link and under 1 % loss, 5 ms +- 2 ms delay with reordering, 0.1 % corruption, on rxe and
# on siw (demos/bench/faulty_link.sh).
link-bench: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) --link -t 1800 -- demos/bench/faulty_link.sh
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) --siw --link -t 1800 -- demos/bench/faulty_link.sh

# Many agents on one server, measured in the test bed: 10 000 concurrent agents (memory per agent,
# setup time against cmtime), a storm of 1000 connects while another client ping-pongs (its
# longest round trip against the quiet server's), the same observer during storms of 2000 against
# a server with 2 workers and one without, 3 rounds in turn (demos/scale/worker_storm.sh), then
# 10 000 connection cycles (the server's and the device's counts back to idle), two workers against
# one, and how long an echo waits with 64 connections of 1 and of 16 messages in flight on one
# server (demos/scale/echo_tail.sh).
scale: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -t 3600 --mem 4G -- sh -c 'demos/scale/agents.sh 10000 5 10 && echo && demos/scale/agents.sh 10000 5 10 -S && echo && demos/scale/storm.sh 1000 && echo && STORM_SIZE=4096 demos/scale/storm.sh 1000 && echo && demos/scale/worker_storm.sh 2000 3 && echo && demos/scale/churn.sh 10000 && echo && demos/scale/workers.sh && echo && demos/scale/echo_tail.sh'

# The API reference, from the installed headers (Doxygen, docs/Doxyfile): $(BUILD_DIR)/docs/html.
# Any Doxygen warning fails it; the unit label runs it too.
docs:
	mkdir -p $(BUILD_DIR)/docs && EVRDMA_DOCS_DIR=$(abspath $(BUILD_DIR))/docs doxygen docs/Doxyfile
	@echo "docs: $(BUILD_DIR)/docs/html/index.html"

clean:
	rm -rf $(BUILD_DIR)
