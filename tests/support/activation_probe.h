// What the activation-bytes tests share: the CPU allocator's live bytes (the measurement)
// and a random leaf that requires a gradient (an input whose activations a layer keeps).
#pragma once

#include <cstdint>

#include "triad.h"

namespace triad::test {

inline double cpu_bytes_in_use() { return double(cpu_allocator().bytes_in_use()); }

inline Tensor random_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty(shape);
  ops::normal_(x, 0.0, 1.0, gen);
  set_requires_grad(x);
  return x;
}

}  // namespace triad::test
