// Counter-based random numbers: element i of a draw is a pure function of (seed, offset + i),
// so results do not depend on the number of threads, and a draw can be replayed exactly
// by restoring the generator's state (activation checkpointing replays dropout masks;
// checkpoints save the state).
#pragma once

#include <cstdint>

#include "tensor/host_device.h"

namespace triad {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}

  const GeneratorState& state() const { return state_; }
  void set_state(const GeneratorState& s) { state_ = s; }
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  // Reserves n counters and returns the first; the caller draws counters first..first+n-1.
  uint64_t advance(uint64_t n) {
    const uint64_t first = state_.offset;
    state_.offset += n;
    return first;
  }

 private:
  GeneratorState state_;
};

// The process-wide generator used when none is passed. Under tensor parallelism it draws
// the same stream on every rank of a tp group (dropout on replicated activations).
Generator& default_generator();
// The generator of draws inside a tensor-parallel region (dropout on a rank's own heads),
// seeded differently on each rank of a tp group: Megatron's model-parallel RNG tracker.
// Activation checkpointing saves and replays it with the default one.
Generator& tensor_parallel_generator();

// Points the default generator at the stream of `seed` for its lifetime, then restores its
// state: what a module draws while one is alive depends on the seed alone (MoE experts and
// gates, each from a stream of its own, whichever process builds them).
class SeededDefaultGenerator {
 public:
  explicit SeededDefaultGenerator(uint64_t seed) : saved_(default_generator().state()) {
    default_generator().manual_seed(seed);
  }
  ~SeededDefaultGenerator() { default_generator().set_state(saved_); }
  SeededDefaultGenerator(const SeededDefaultGenerator&) = delete;
  SeededDefaultGenerator& operator=(const SeededDefaultGenerator&) = delete;

 private:
  GeneratorState saved_;
};

// 64 random bits for counter `counter` under `seed` (a splitmix64-style mix of both). These
// two are also device functions: a kernel draws exactly what the host draws.
TRIAD_HOST_DEVICE inline uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + counter * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  z = (z ^ (z >> 29)) * 0xd6e8feb86659fd93ull;
  return z ^ (z >> 32);
}

// Uniform in [0, 1) with 53 random bits.
TRIAD_HOST_DEVICE inline double random_uniform(uint64_t seed, uint64_t counter) {
  return double(random_bits(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace triad
