// What both BPE tokenizers (triad_tokenizer.cpp, hf_tokenizer.cpp) share: the key of a
// merge pair in their rank tables, and the bound on their per-word caches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace triad::io {

// The key of the adjacent pair (left, right) of token ids.
inline uint64_t merge_pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

// Words cached with their encodings before a cache is cleared.
constexpr size_t kMaxCachedWords = size_t(1) << 20;

}  // namespace triad::io
