#include "io/crc32c.h"

#include <array>
#include <cstring>

namespace triad::io {

namespace {

// Byte-at-a-time table: entry b is the CRC of byte b alone (no pre/post inversion).
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0u);
    table[b] = crc;
  }
  return table;
}

uint32_t crc32c_table(const unsigned char* bytes, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < size; ++i) crc = (crc >> 8) ^ table[(crc ^ bytes[i]) & 0xFF];
  return crc;
}

using CrcLoop = uint32_t (*)(const unsigned char* bytes, size_t size, uint32_t crc);

#if defined(__x86_64__)
// SSE 4.2's crc32 instruction computes this very polynomial, 8 bytes at a time: many times
// the table's speed, which matters for the offloaded optimizer state (every swap file read
// and write is checksummed, zero/nvme_shard_store.h).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* bytes, size_t size, uint32_t crc) {
  uint64_t wide = crc;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    wide = __builtin_ia32_crc32di(wide, word);
  }
  crc = uint32_t(wide);
  for (; i < size; ++i) crc = __builtin_ia32_crc32qi(crc, bytes[i]);
  return crc;
}
CrcLoop fastest_loop() { return __builtin_cpu_supports("sse4.2") ? crc32c_sse42 : crc32c_table; }
#else
CrcLoop fastest_loop() { return crc32c_table; }
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const CrcLoop loop = fastest_loop();
  return loop(static_cast<const unsigned char*>(data), size, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace triad::io
