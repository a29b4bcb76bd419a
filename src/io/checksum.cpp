// mix(i, b) = F(b ^ i·K): the element's bits XORed with its scrambled index, through
// splitmix64's finalizer F. For a fixed i, b ↦ b ^ i·K is a bijection (XOR with a
// constant) and F is one too: each x ^= x >> s is invertible (the top s bits are
// unchanged and recover the rest, s bits at a time) and multiplication by an odd constant
// is invertible modulo 2^64. A composition of bijections is a bijection, so two different
// bit patterns of element i always give different terms — the property checksum.h relies
// on. F's avalanche makes the terms of different elements look independent, so damage to
// several elements cancels only by chance.
#include "io/checksum.h"

#include <algorithm>
#include <cstring>

namespace triad::io {

namespace {

constexpr uint64_t kIndexScramble = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr int64_t kParallelMin = int64_t(1) << 16;          // elements: below this one thread; also the block size

// F, splitmix64's finalizer.
inline uint64_t finalize(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

inline uint64_t mix(uint64_t index, uint64_t bits) { return finalize(bits ^ (index * kIndexScramble)); }

// The sum of the terms of data[0, count), elements first, first + 1, ... It carries i·K
// from one element to the next by adding K (linear(scrambled)), where AVX2 would spend
// three 32-bit multiplies on each 64-bit one. A plain simd loop in its own function: the
// same loop as an `omp parallel for simd` ran at half the speed, even on one thread.
template <class U>
uint64_t sum_simd(const U* data, uint64_t first, int64_t count) {
  uint64_t sum = 0, scrambled = first * kIndexScramble;
#pragma omp simd reduction(+ : sum) linear(scrambled : kIndexScramble)
  for (int64_t k = 0; k < count; ++k) {
    sum += finalize(uint64_t(data[k]) ^ scrambled);
    scrambled += kIndexScramble;
  }
  return sum;
}

// Unaligned data (a view at an odd byte offset) is read through memcpy.
template <class U>
uint64_t sum_unaligned(const unsigned char* data, uint64_t first, int64_t count) {
  uint64_t sum = 0, scrambled = first * kIndexScramble;
  for (int64_t k = 0; k < count; ++k) {
    U v;
    std::memcpy(&v, data + size_t(k) * sizeof(U), sizeof(U));
    sum += finalize(uint64_t(v) ^ scrambled);
    scrambled += kIndexScramble;
  }
  return sum;
}

template <class U>
uint64_t sum_block(const unsigned char* data, uint64_t first, int64_t count, bool aligned) {
  return aligned ? sum_simd(reinterpret_cast<const U*>(data), first, count) : sum_unaligned<U>(data, first, count);
}

// Large counts are split into blocks shared among the OpenMP threads.
template <class U>
uint64_t sum_any(const void* data, uint64_t first, int64_t count, bool threads) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  const bool aligned = reinterpret_cast<uintptr_t>(data) % alignof(U) == 0;
  if (!threads || count < kParallelMin) return sum_block<U>(bytes, first, count, aligned);
  const int64_t blocks = (count + kParallelMin - 1) / kParallelMin;
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kParallelMin, n = std::min(kParallelMin, count - begin);
    sum += sum_block<U>(bytes + size_t(begin) * sizeof(U), first + uint64_t(begin), n, aligned);
  }
  return sum;
}

}  // namespace

uint64_t checksum_mix(int64_t index, uint64_t bits) { return mix(uint64_t(index), bits); }

uint64_t range_checksum(const void* data, int64_t first_index, int64_t count, int element_size,
                        ChecksumThreads threads) {
  TRIAD_CHECK(count >= 0 && first_index >= 0,
              "range_checksum: expected first_index >= 0 and count >= 0, got " << first_index << " and " << count);
  TRIAD_CHECK(count == 0 || data != nullptr, "range_checksum: null data for " << count << " elements");
  const uint64_t first = uint64_t(first_index);
  const bool openmp = threads == ChecksumThreads::openmp;
  switch (element_size) {
    case 1:
      return sum_any<uint8_t>(data, first, count, openmp);
    case 2:
      return sum_any<uint16_t>(data, first, count, openmp);
    case 4:
      return sum_any<uint32_t>(data, first, count, openmp);
    case 8:
      return sum_any<uint64_t>(data, first, count, openmp);
    default:
      TRIAD_CHECK(false, "range_checksum: element_size must be 1, 2, 4 or 8 bytes, got " << element_size);
  }
  return 0;
}

uint64_t tensor_checksum(const Tensor& t, int64_t first_index, ChecksumThreads threads) {
  TRIAD_CHECK(t.device().is_cpu() && t.is_contiguous(),
              "tensor_checksum: expected a contiguous CPU tensor, got " << t.str());
  return range_checksum(t.raw_data(), first_index, t.numel(), int(element_size(t.dtype())), threads);
}

}  // namespace triad::io
