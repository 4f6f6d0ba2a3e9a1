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

# The main demo, for now: sixteen clients and one server making verified send/recv round trips
# over real RDMA in the test bed, then each message size once; each run prints its figures.
demo: build
	$(RDMA_RUN) -- $(BUILD_DIR)/tests/rdma_send_recv_roundtrip_test --gtest_filter='SendRecvRoundTripMany.*:Sizes/*'

bench:
	@echo "bench: not yet (benchmarks come with the data path)"

clean:
	rm -rf $(BUILD_DIR)
