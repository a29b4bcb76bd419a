// Token files (.bin): a corpus encoded once by `triad-data encode` and read by training
// through a read-only memory map, so every process of a job shares one page-cache copy.
//
// Layout, little-endian, 36-byte header then the tokens:
//   magic "TRIADTOK" | u32 version (1) | u32 dtype (bytes per token: 2 = uint16, 4 = uint32)
//   | u32 vocab_size | u64 count | u64 checksum (FNV-1a 64 of the token bytes as stored)
// uint16 is used whenever vocab_size <= 65536. Every token is < vocab_size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::io {

// Writes `tokens` to `path` (through a temporary file renamed into place). Throws Error naming
// the path when vocab_size is 0, a token is >= vocab_size, or the file cannot be written.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size);

// FNV-1a 64 over `n` bytes, continuing from `hash` (start with kFnvOffset).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(const void* data, size_t n, uint64_t hash = kFnvOffset);

class TokenFile {
 public:
  static constexpr size_t kHeaderBytes = 36;
  static constexpr uint32_t kVersion = 1;

  // Maps `path` and checks it whole: magic, version, dtype, file size against count, the
  // checksum, and every token < vocab_size (one pass over the data). Throws Error naming the
  // path and what is wrong.
  static TokenFile open(const std::string& path);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int64_t size() const { return count_; }
  uint32_t vocab_size() const { return vocab_size_; }
  int bytes_per_token() const { return int(dtype_); }
  uint64_t checksum() const { return checksum_; }
  const std::string& path() const { return path_; }

  // Token i; throws Error when i is outside [0, size()).
  uint32_t at(int64_t i) const;
  // Copies tokens [start, start + n) into out[0, n); throws Error naming the file when the
  // range is not inside [0, size()).
  void read(int64_t start, int64_t n, int64_t* out) const;

 private:
  TokenFile() = default;
  void check_range(int64_t start, int64_t n) const;

  std::string path_;
  const unsigned char* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
  int64_t count_ = 0;
  uint32_t vocab_size_ = 0;
  uint32_t dtype_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace triad::io
