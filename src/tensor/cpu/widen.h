// 16-bit storage on the CPU (Note [16-bit activations] in autograd/functions.cpp): a floating
// kernel given bf16/f16 operands runs its f32 version on f32 copies of them and rounds each
// 16-bit result once, to nearest even, on the way back. So every CPU op's 16-bit result is
// its f32 result on the rounded inputs, rounded once; the copies are the kernel's own
// scratch, not conversion ops.
#pragma once

#include <initializer_list>

#include "tensor/backend.h"

namespace triad::cpu {

inline bool is_16bit(const Tensor& t) { return t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16); }

inline bool any_16bit(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (is_16bit(*t)) return true;
  return false;
}

// t when it is not 16-bit (or undefined); else a contiguous f32 copy.
inline Tensor widen(const Tensor& t) {
  if (!is_16bit(t)) return t;
  Tensor w = Tensor::empty(t.shape(), DType::f32);
  backend_for(Device::cpu()).copy(w, t);
  return w;
}

// Where an f32 kernel writes a result destined for `out`: out itself when it is not 16-bit,
// else an f32 buffer of its shape that store() rounds into out. `initial` buffers start as
// a copy of out (for kernels that add into their output).
class WideOut {
 public:
  explicit WideOut(const Tensor& out, bool initial = false) : out_(out) {
    wide_ = is_16bit(out) ? (initial ? widen(out) : Tensor::empty(out.shape(), DType::f32)) : out;
  }
  const Tensor& get() const { return wide_; }
  void store() const {
    if (is_16bit(out_)) backend_for(Device::cpu()).copy(out_, wide_);
  }

 private:
  Tensor out_, wide_;
};

}  // namespace triad::cpu
