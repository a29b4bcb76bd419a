// Checking CUDA return codes: every call goes through TRIAD_CUDA_CHECK, which throws
// triad::Error with the call's file:line and the driver's message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tensor/error.h"

#define TRIAD_CUDA_CHECK(expr)                                                                                \
  do {                                                                                                        \
    const cudaError_t triad_cuda_err_ = (expr);                                                               \
    if (triad_cuda_err_ != cudaSuccess)                                                                       \
      throw ::triad::Error(std::string("CUDA error at ") + __FILE__ + ":" + std::to_string(__LINE__) + ": " + \
                           cudaGetErrorString(triad_cuda_err_) + " (" #expr ")");                             \
  } while (0)
