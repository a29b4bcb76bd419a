// GEMM through Eigen (one product, a batch of them, a group of them), and linear layers (a
// GEMM and its bias; with a GELU after it). With EIGEN_USE_BLAS (set for this library)
// Eigen forwards large products to the OpenMP build of OpenBLAS; small ones stay in
// Eigen's own kernels. Batched products run their batch in parallel when the
// batch is large and each product small (attention), and one product at a time, each
// multi-threaded, otherwise. bf16/f16 operands multiply as f32 copies into an f32 result
// rounded once (tensor/cpu/widen.h).
#include <omp.h>

#include <Eigen/Core>

#include "tensor/allocator.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/vec_math.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/cpu/widen.h"

namespace triad {

namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMajor<T>>;
template <class T>
using Map = Eigen::Map<RowMajor<T>>;

// c = op(a) op(b), or c += op(a) op(b) when accumulating (BLAS's beta = 1).
template <class T>
void gemm(const T* a, const T* b, T* c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool accumulate) {
  Map<T> C(c, m, n);
  const ConstMap<T> A(a, ta ? k : m, ta ? m : k);
  const ConstMap<T> B(b, tb ? n : k, tb ? k : n);
  const auto put = [&](const auto& product) {
    if (accumulate)
      C.noalias() += product;
    else
      C.noalias() = product;
  };
  if (!ta && !tb)
    put(A * B);
  else if (!ta && tb)
    put(A * B.transpose());
  else if (ta && !tb)
    put(A.transpose() * B);
  else
    put(A.transpose() * B.transpose());
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch,
                        int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (cpu::any_16bit({&a, &b, &out})) {
    const cpu::WideOut o(out, /*initial=*/accumulate);
    matmul(cpu::widen(a), cpu::widen(b), o.get(), trans_a, trans_b, batch, m, n, k, accumulate);
    return o.store();
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    const int64_t b_step = b.dim() == 2 ? 0 : k * n;
    if (batch == 1) {
      gemm(pa, pb, pc, trans_a, trans_b, m, n, k, accumulate);
      return;
    }
    const bool parallel_batch = batch >= omp_get_max_threads() && m * n * k < (int64_t(1) << 21);
#pragma omp parallel for if (parallel_batch) schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      gemm(pa + i * m * k, pb + i * b_step, pc + i * m * n, trans_a, trans_b, m, n, k, accumulate);
  };
  cpu::visit_float(a.dtype(), run);
}

// One group after another, each multi-threaded as matmul's is, each the product the loop of
// matmul calls it replaces makes, bit for bit. That loop writes fresh results, aligned to
// kCpuAlignment, and Eigen's small products (K + M + N < 20, computed coefficient-wise)
// round by the destination's alignment, so a result that is not so aligned (a slice of one
// buffer) is computed into a fresh block and copied.
void CpuBackend::grouped_matmul(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                                const std::vector<Tensor>& out, bool trans_a, bool trans_b,
                                const std::vector<GemmDims>& dims, bool accumulate) {
  for (size_t g = 0; g < a.size(); ++g) {
    const auto [m, n, k] = dims[g];
    if (accumulate || reinterpret_cast<uintptr_t>(out[g].raw_data()) % kCpuAlignment == 0) {
      matmul(a[g], b[g], out[g], trans_a, trans_b, 1, m, n, k, accumulate);
      continue;
    }
    const Tensor fresh = Tensor::empty(out[g].shape(), out[g].dtype());
    matmul(a[g], b[g], fresh, trans_a, trans_b, 1, m, n, k, false);
    copy(out[g], fresh);
  }
}

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  if (cpu::any_16bit({&x, &weight, &bias, &out})) {
    const cpu::WideOut o(out);
    linear(cpu::widen(x), cpu::widen(weight), cpu::widen(bias), o.get());
    return o.store();
  }
  matmul(x, weight, out, false, true, 1, x.size(0), weight.size(0), x.size(1), false);
  if (!bias.defined()) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = bias.numel(), rows = out.numel() / std::max<int64_t>(n, 1);
    T* po = out.data<T>();
    const T* pb = bias.data<T>();
#pragma omp parallel for if (rows * n > (1 << 15))
    for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) po[r * n + j] += pb[j];
    }
  };
  cpu::visit_float(out.dtype(), run);
}

// The GELU reads the f32 (f64) sum before pre is rounded to a 16-bit dtype.
void CpuBackend::linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                             const Tensor& out) {
  if (cpu::any_16bit({&x, &weight, &bias, &pre, &out})) {
    const cpu::WideOut opre(pre), oout(out);
    linear_gelu(cpu::widen(x), cpu::widen(weight), cpu::widen(bias), opre.get(), oout.get());
    opre.store();
    return oout.store();
  }
  linear(x, weight, bias, pre);
  cpu::visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = out.numel();
    const T* pp = pre.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = cpu::gelu(pp[i]);
  });
}

}  // namespace triad
