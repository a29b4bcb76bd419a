// TRIAD_HOST_DEVICE marks a function that host and device code both call: __host__
// __device__ when nvcc compiles it, nothing for the host compiler. It lets the tensor
// layer own code the CUDA backend runs on the device and must share with the CPU bit for
// bit (tensor/float16.h, the random numbers of tensor/random.h, tensor/sampling.h) without
// including a CUDA header; nvcc declares __host__ and __device__ itself.
#pragma once

#if defined(__CUDACC__)
#define TRIAD_HOST_DEVICE __host__ __device__
#else
#define TRIAD_HOST_DEVICE
#endif
