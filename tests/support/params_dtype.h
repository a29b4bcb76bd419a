// Converting a module's parameters to another dtype in place, for tests that run a layer
// built in f32 in f64 (gradient checks) or in 16 bits.
#pragma once

#include "nn/module.h"
#include "tensor/ops.h"

namespace triad::test {

// Converts every parameter of m to `dtype` in place: each keeps its TensorImpl, so every
// holder of the handle (the modules) sees the converted values.
inline void params_to(nn::Module& m, DType dtype) {
  for (auto& [name, p] : m.named_parameters()) {
    TensorImpl& impl = p.impl();
    const Tensor d = ops::to(p, dtype);
    impl.storage = d.storage();
    impl.dtype = dtype;
    impl.strides = d.strides();
    impl.offset = 0;
  }
}

}  // namespace triad::test
