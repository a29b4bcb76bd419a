// Checking return codes: every CUDA runtime, cuBLASLt and NCCL call goes through one of
// these macros, which throw triad::Error with the library's message, the call, its
// file:line and the rank (cuda/error.h). Included only by .cu files. The cuBLASLt and NCCL
// macros name those libraries' functions; the file that uses them includes their header.
#pragma once

#include <cuda_runtime.h>

#include "cuda/error.h"

#define TRIAD_CUDA_CHECK(expr)                                                                                    \
  do {                                                                                                            \
    const cudaError_t triad_cuda_err_ = (expr);                                                                   \
    if (triad_cuda_err_ != cudaSuccess)                                                                           \
      ::triad::cuda::detail::throw_error("CUDA", cudaGetErrorString(triad_cuda_err_), #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration shows here; faults inside the kernel
// show at the next synchronizing call.
#define TRIAD_CUDA_CHECK_LAUNCH() TRIAD_CUDA_CHECK(cudaGetLastError())

#define TRIAD_CUBLAS_CHECK(expr)                                                                                     \
  do {                                                                                                               \
    const cublasStatus_t triad_cublas_status_ = (expr);                                                              \
    if (triad_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                               \
      ::triad::cuda::detail::throw_error("cuBLASLt", cublasLtGetStatusString(triad_cublas_status_), #expr, __FILE__, \
                                         __LINE__);                                                                  \
  } while (0)

#define TRIAD_NCCL_CHECK(expr)                                                                                       \
  do {                                                                                                               \
    const ncclResult_t triad_nccl_result_ = (expr);                                                                  \
    if (triad_nccl_result_ != ncclSuccess)                                                                           \
      ::triad::cuda::detail::throw_error("NCCL", ncclGetErrorString(triad_nccl_result_), #expr, __FILE__, __LINE__); \
  } while (0)
