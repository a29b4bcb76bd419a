// A content checksum of a tensor's elements that composes over element ranges: ranks that
// each hold a disjoint range of one flattened tensor compute partial checksums and their
// sum (uint64, wrapping) is the checksum of the whole tensor, whatever the partition.
//
//   checksum = Σ_i mix(i, bits_i)  (mod 2^64)
//
// i is an element's index in the whole flattened (row-major) tensor and bits_i its raw
// bits, the element read as an unsigned integer of its width (1, 2, 4 or 8 bytes, the
// machine's byte order) zero-extended to 64 bits. So the checksum depends on values and
// positions only: the same tensor gives the same checksum however it is split, stored or
// gathered, and bf16, f16, f32, ... of the same numbers give different ones.
//
// Any change to one element (any flipped bit or byte) changes the checksum, because
// mix(i, ·) is a bijection on 64 bits for every i (see checksum.cpp): a different
// bits_i gives a different term and so a different sum. Changes to several elements
// can cancel only by chance (about 2^-64 for unstructured damage).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace triad::io {

// The term of element i with raw bits `bits`.
uint64_t checksum_mix(int64_t index, uint64_t bits);

// Where a checksum runs: on the caller's OpenMP threads (for large counts), or on the
// calling thread alone (a background thread that must leave the cores to the caller's
// other work).
enum class ChecksumThreads { openmp, calling };

// Σ mix(first_index + k, bits of data[k]) over k in [0, count): the partial checksum of
// elements [first_index, first_index + count) of a flattened tensor whose elements
// data[0..count) are. element_size is 1, 2, 4 or 8 (Error otherwise); count >= 0 and
// first_index >= 0.
uint64_t range_checksum(const void* data, int64_t first_index, int64_t count, int element_size,
                        ChecksumThreads threads = ChecksumThreads::openmp);

// range_checksum over a contiguous CPU tensor's elements, taken as elements
// [first_index, first_index + t.numel()) of a larger flattened tensor (0: the whole).
uint64_t tensor_checksum(const Tensor& t, int64_t first_index = 0, ChecksumThreads threads = ChecksumThreads::openmp);

}  // namespace triad::io
