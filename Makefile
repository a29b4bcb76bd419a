# Thin wrapper over CMake: `make` builds into build/ (binaries in build/bin/).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure demo rlhf-demo test test-slow bench clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/setup-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

# The main job: train a small GPT on the fortunes corpus and sample from it. Builds only
# the three programs it runs (not the tests and benchmarks `all` builds).
DEMO_PROGRAMS = triad-data triad-train triad-generate
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_PROGRAMS)
	scripts/demo.sh

# DeepSpeed-Chat's three steps (SFT, reward model, PPO), and GRPO and DPO, on the embedded
# fortunes preference pairs (configs/rlhf-demo.json, scripts/rlhf-demo.sh).
RLHF_PROGRAMS = triad-data triad-train triad-rlhf triad-generate
rlhf-demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target $(RLHF_PROGRAMS)
	TRIAD_BIN=$(abspath $(BUILD))/bin scripts/rlhf-demo.sh

# Unit tests (everything but the slow label).
test: all
	cd $(BUILD) && ctest --output-on-failure -LE slow -j $(JOBS)

test-slow: all
	cd $(BUILD) && ctest --output-on-failure -L slow

bench: all
	$(BUILD)/bin/triad-bench step --model tiny --steps 10 --warmup 2
	$(BUILD)/bin/bench-gemm --benchmark_min_time=0.2

clean:
	rm -rf $(BUILD)
