// Reductions (tensor/cpu/reduce.cpp on the GPU), of f32, bf16 or f16 operands (Floats).
// - Over a dimension, in f32 (a 16-bit result rounded once): one block per row when the reduced elements are contiguous
//   (inner == 1); otherwise one thread per output along the contiguous inner run, the
//   reduced dimension cut into chunks reduced to partials first when there are too few
//   outputs to fill the device.
// - Whole tensors to a host double: each thread accumulates in double, blocks write
//   partials, one block combines them (those of several tensors at once for sum_squares).
//   No atomics, so results are the same every run.
#include <limits>
#include <vector>

#include "cuda/backend/convert.cuh"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/deferred_errors.h"

namespace triad::cuda {

namespace {

template <class Op>
__global__ void reduce_rows_kernel(Floats a, Floats out, int64_t n, Op op, float identity) {
  const int64_t row = blockIdx.x * n;
  float r = identity;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) r = op(r, a.load(row + j));
  r = block_reduce(r, op, identity);
  if (threadIdx.x == 0) out.store(blockIdx.x, r);
}

// a (outer, n, inner) -> out (outer, chunks, inner): chunk c reduces j in [c len, (c+1) len).
template <class Op>
__global__ void reduce_columns_kernel(Floats a, Floats out, int64_t outer, int64_t n, int64_t inner, int64_t chunks,
                                      int64_t len, Op op, float identity) {
  const int64_t total = outer * chunks * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, c = (t / inner) % chunks, o = t / (inner * chunks);
    const int64_t begin = c * len, end = begin + len < n ? begin + len : n;
    const int64_t src = o * n * inner + i;
    float r = identity;
    for (int64_t j = begin; j < end; ++j) r = op(r, a.load(src + j * inner));
    out.store(t, r);
  }
}

template <class Op>
void reduce_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner, Op op, float identity,
                const char* method) {
  const Floats fa = floats(a, method), fout = floats(out, method);
  if (out.numel() == 0) return;
  OnDevice on(a);
  if (inner == 1) {
    reduce_rows_kernel<<<unsigned(outer), row_threads(n), 0, on.stream()>>>(fa, fout, n, op, identity);
    TRIAD_CUDA_CHECK_LAUNCH();
    return;
  }
  // Outputs enough to fill the device, or a short reduction: one pass.
  constexpr int64_t kEnough = int64_t(1) << 16;
  const int64_t outputs = outer * inner;
  int64_t chunks = 1;
  if (outputs < kEnough && n > 64) chunks = std::min<int64_t>((kEnough + outputs - 1) / outputs, (n + 31) / 32);
  if (chunks == 1) {
    reduce_columns_kernel<<<blocks_for(outputs), kThreads, 0, on.stream()>>>(fa, fout, outer, n, inner, 1, n, op,
                                                                             identity);
    TRIAD_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t len = (n + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({outer, chunks, inner}, DType::f32, a.device());
  const Floats fpartial = floats(partial, method);
  reduce_columns_kernel<<<blocks_for(outputs * chunks), kThreads, 0, on.stream()>>>(fa, fpartial, outer, n, inner,
                                                                                    chunks, len, op, identity);
  TRIAD_CUDA_CHECK_LAUNCH();
  reduce_columns_kernel<<<blocks_for(outputs), kThreads, 0, on.stream()>>>(fpartial, fout, outer, chunks, inner, 1,
                                                                           chunks, op, identity);
  TRIAD_CUDA_CHECK_LAUNCH();
}

// ---- whole-tensor reductions to a double ----

struct Identity {
  __device__ double operator()(double v) const { return v; }
};
struct Square {
  __device__ double operator()(double v) const { return v * v; }
};
struct Abs {
  __device__ double operator()(double v) const { return fabs(v); }
};
struct TimesZero {  // NaN for a NaN or inf, else 0 (as the CPU's all_finite)
  __device__ double operator()(double v) const { return v * 0.0; }
};
struct MaxIgnoringNaN {  // std::max(m, v) of the CPU's max_abs: a NaN never wins
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

constexpr int kAllBlocks = 1024;  // partials of a whole-tensor reduction, at most

template <class F, class Combine>
__global__ void reduce_all_kernel(Floats a, int64_t n, double* partial, F f, Combine combine) {
  double r = 0.0;  // the identity of every combination used (sum; max of |v| >= 0)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    r = combine(r, f(double(a.load(i))));
  r = block_reduce(r, combine, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

// out[0] (of dtype t) = the combination of partial[0, count), rounded once to t.
template <class Combine>
__global__ void combine_partials_kernel(const double* partial, int count, void* out, DType t, Combine combine) {
  double r = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) r = combine(r, partial[i]);
  r = block_reduce(r, combine, 0.0);
  if (threadIdx.x == 0) store_double(out, 0, t, r);
}

// Queues the reduction of f over every element of the tensors (f32, bf16 or f16,
// contiguous, on one device) into out (one element in device memory, rounded once to its
// dtype): each tensor's blocks write their own partials, one block combines them all. No
// tensor or no element: 0.
template <class F, class Combine>
void reduce_all_to(const std::vector<Tensor>& tensors, F f, Combine combine, const Tensor& out) {
  const Device device = out.device();
  std::vector<int> blocks;
  int total = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel();
    blocks.push_back(n ? int(std::min<int64_t>(kAllBlocks, (n + kThreads * 4 - 1) / (kThreads * 4))) : 0);
    total += blocks.back();
  }
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  if (total == 0) {
    TRIAD_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, element_size(out.dtype()), stream));  // +0 in every dtype
    return;
  }
  Tensor partial = Tensor::empty({total}, DType::f64, device);
  double* p = ptr<double>(partial);
  for (size_t i = 0, first = 0; i < tensors.size(); first += blocks[i], ++i) {
    if (!blocks[i]) continue;
    reduce_all_kernel<<<blocks[i], kThreads, 0, stream>>>(floats(tensors[i], "reduction"), tensors[i].numel(),
                                                          p + first, f, combine);
    TRIAD_CUDA_CHECK_LAUNCH();
  }
  combine_partials_kernel<<<1, kThreads * 2, 0, stream>>>(p, total, out.raw_data(), out.dtype(), combine);
  TRIAD_CUDA_CHECK_LAUNCH();
}

// reduce_all_to, then the host waits once for the result.
template <class F, class Combine>
double reduce_all(const std::vector<Tensor>& tensors, F f, Combine combine) {
  if (tensors.empty()) return 0.0;
  const Device device = tensors[0].device();
  const Tensor out = Tensor::empty({1}, DType::f64, device);
  reduce_all_to(tensors, f, combine, out);
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  double result = 0.0;
  TRIAD_CUDA_CHECK(cudaMemcpyAsync(&result, ptr<double>(out), sizeof(double), cudaMemcpyDeviceToHost, stream));
  TRIAD_CUDA_CHECK(cudaStreamSynchronize(stream));
  raise_deferred_errors(device.index);
  return result;
}

}  // namespace

void CudaBackend::sum_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) {
  reduce_dim(a, out, outer, n, inner, SumOp{}, 0.0f, "sum_dim");
}

void CudaBackend::max_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) {
  reduce_dim(a, out, outer, n, inner, MaxOp{}, -std::numeric_limits<float>::infinity(), "max_dim");
}

void CudaBackend::sum_all_to(const Tensor& a, const Tensor& out) {
  require_floating(a, "sum");
  reduce_all_to({a}, Identity{}, SumOp{}, out);
}

double CudaBackend::sum_squares(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) require_floating(t, "sum_squares");
  return reduce_all(tensors, Square{}, SumOp{});
}

void CudaBackend::sum_squares_to(const std::vector<Tensor>& tensors, const Tensor& out) {
  for (const Tensor& t : tensors) require_floating(t, "sum_squares");
  reduce_all_to(tensors, Square{}, SumOp{}, out);
}

double CudaBackend::max_abs(const Tensor& a) { return reduce_all({a}, Abs{}, MaxIgnoringNaN{}); }

bool CudaBackend::all_finite(const Tensor& a) { return reduce_all({a}, TimesZero{}, SumOp{}) == 0.0; }

}  // namespace triad::cuda
