// mix(i, b) = F(b ^ i·K): the element's bits XORed with its scrambled index, through
// splitmix64's finalizer F. For a fixed i, b ↦ b ^ i·K is a bijection (XOR with a
// constant) and F is one too: each x ^= x >> s is invertible (the top s bits are
// unchanged and recover the rest, s bits at a time) and multiplication by an odd constant
// is invertible modulo 2^64. A composition of bijections is a bijection, so two different
// bit patterns of element i always give different terms — the property checksum.h relies
// on. F's avalanche makes the terms of different elements look independent, so damage to
// several elements cancels only by chance.
#include "io/checksum.h"

#include <cstring>

namespace triad::io {

namespace {

constexpr uint64_t kIndexScramble = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr int64_t kParallelMin = int64_t(1) << 16;          // elements; below this one thread

inline uint64_t mix(uint64_t index, uint64_t bits) {
  uint64_t x = bits ^ (index * kIndexScramble);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

template <class U>
uint64_t sum_terms(const U* data, uint64_t first, int64_t count, bool threads) {
  uint64_t sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static) if (threads && count >= kParallelMin)
  for (int64_t k = 0; k < count; ++k) sum += mix(first + uint64_t(k), uint64_t(data[k]));
  return sum;
}

// Unaligned data (a view at an odd byte offset) is read through memcpy.
template <class U>
uint64_t sum_terms_unaligned(const unsigned char* data, uint64_t first, int64_t count, bool threads) {
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (threads && count >= kParallelMin)
  for (int64_t k = 0; k < count; ++k) {
    U v;
    std::memcpy(&v, data + size_t(k) * sizeof(U), sizeof(U));
    sum += mix(first + uint64_t(k), uint64_t(v));
  }
  return sum;
}

template <class U>
uint64_t sum_any(const void* data, uint64_t first, int64_t count, bool threads) {
  if (reinterpret_cast<uintptr_t>(data) % alignof(U) == 0)
    return sum_terms(static_cast<const U*>(data), first, count, threads);
  return sum_terms_unaligned<U>(static_cast<const unsigned char*>(data), first, count, threads);
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
