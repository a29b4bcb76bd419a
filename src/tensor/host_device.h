// TRIAD_HOST_DEVICE marks a function that both the host compiler and nvcc's device code
// compile: header-only arithmetic that a CPU kernel and a CUDA kernel must share bit for bit
// (the counter-based random numbers, token sampling). Outside nvcc it is empty.
#pragma once

#if defined(__CUDACC__)
#define TRIAD_HOST_DEVICE __host__ __device__
#else
#define TRIAD_HOST_DEVICE
#endif
