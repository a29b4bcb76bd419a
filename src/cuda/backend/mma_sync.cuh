// The warp-level tensor-core instructions of the attention and quantized linear kernels, as
// inline PTX (compute capability 8.0 and up): mma.sync m16n8k16 (16-bit inputs with f32
// accumulators, 8-bit integers with int32 ones), ldmatrix and cp.async. Included by
// attention_mma.cu and quantized_linear.cu before their kernels' headers; a CPU test
// includes an emulation of the same functions instead (tests/cuda/cuda_emulation.h).
//
// Fragments (the PTX ISA's layouts; lane = 4 g + t, g = lane / 4, t = lane % 4): an A
// fragment (16 x 16, row-major) is 4 registers of two 16-bit elements, the lower-indexed
// in the low half: rows g, g + 8, g, g + 8 and columns 2t, 2t + 1 (+ 8 in the last two);
// a B fragment (16 x 8) is 2 registers: rows 2t, 2t + 1 (+ 8 in the second), column g; a
// C fragment (16 x 8, f32) is 4 floats: row g, columns 2t, 2t + 1, then row g + 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace triad::cuda {

// d += a b for 16-bit inputs of type W (__nv_bfloat16 or __half).
template <class W>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a b for 8-bit signed integers, exactly in int32: A (16 x 16) is 2 registers of 4
// elements, rows g and g + 8, columns 4t .. 4t + 3 (the lowest in the low byte); B (16 x 8)
// one register, rows 4t .. 4t + 3 of column g; d a C fragment of int32.
__device__ inline void mma_s8_16816(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8i .. 8i + 7 give the
// addresses of matrix i's rows (16-byte aligned); register i of lane 4 g + t receives
// matrix i's row g, columns 2t and 2t + 1.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned at = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// The same, each matrix transposed: register i of lane 4 g + t receives matrix i's rows 2t
// and 2t + 1 of column g.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned at = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// 16 bytes from global to shared memory without passing through registers; visible after
// cp_async_commit and cp_async_wait_all (and a barrier, for the other threads).
__device__ inline void cp_async_16(void* shared, const void* global) {
  const unsigned at = unsigned(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(global));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// p[0] += a and p[1] += b atomically (p 8-byte aligned): one vector atomic on compute
// capability 9.0, two elsewhere.
__device__ inline void atomic_add_pair(float* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

}  // namespace triad::cuda
