# A thin wrapper around CMake and the tools in tools/. Everything here works on a fresh Debian 12
# machine after `make deps`.
BUILD_DIR ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RDMA_RUN ?= tools/rdma-run

.PHONY: all deps build install deb test demo bench scale clean

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

# The main demo: a pingpong server and 16 concurrent clients over real RDMA in the test bed,
# every byte verified, figures per client and in all.
demo: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -- demos/pingpong/demo.sh 16 500 4096

# evrdma against perftest, measured in the same test-bed run: round-trip latency (pingpong vs
# ib_send_lat -e), then one-way throughput per mode (blast vs ib_send_bw / ib_write_bw / ib_read_bw),
# then how an application's own timer and HTTP server fare on the loop while RDMA floods it, against
# the same loop quiet (evrdma-loop-latency).
bench: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -t 1800 -- sh -c 'demos/pingpong/bench.sh 5000 64 && echo && demos/blast/bench.sh 65536 2000 16 && echo && $(BUILD_DIR)/demos/evrdma-loop-latency -a "$$EVRDMA_RDMA_IP" -d 3'

# Many agents on one server, measured in the test bed: 10 000 concurrent agents (memory per agent,
# setup time against cmtime), a storm of 1000 connects while another client ping-pongs (its
# longest round trip against the quiet server's), then 10 000 connection cycles (the server's and
# the device's counts back to idle).
scale: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -t 3600 --mem 4G -- sh -c 'demos/scale/agents.sh 10000 5 10 && echo && demos/scale/agents.sh 10000 5 10 -S && echo && demos/scale/storm.sh 1000 && echo && demos/scale/churn.sh 10000 && echo && demos/scale/workers.sh'

clean:
	rm -rf $(BUILD_DIR)
