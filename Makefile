# A thin wrapper around CMake and the tools in tools/. Everything here works on a fresh Debian 12
# machine after `make deps`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RDMA_RUN ?= tools/rdma-run

.PHONY: all deps build test demo bench clean

all: build

deps:
	tools/install-deps

build:
	cmake -S . -B $(BUILD_DIR) >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

test:
	BUILD_DIR=$(BUILD_DIR) tools/run-tests

# The main demo: a pingpong server and 16 concurrent clients over real RDMA in the test bed,
# every byte verified, figures per client and in all.
demo: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -- demos/pingpong/demo.sh 16 500 4096

# Round-trip latency of evrdma against perftest's ib_send_lat -e, measured in the same test-bed run.
bench: build
	BUILD_DIR=$(BUILD_DIR) $(RDMA_RUN) -- demos/pingpong/bench.sh 5000 64

clean:
	rm -rf $(BUILD_DIR)
