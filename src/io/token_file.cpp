// Token files: writing (atomically), mapping and validating. A file is checked whole when
// opened, so a training run fails at start-up, naming the file, rather than mid-run.
#include "io/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "io/atomic_file.h"
#include "tensor/error.h"

namespace triad::io {

static_assert(std::endian::native == std::endian::little, "token files are read in place: little-endian hosts only");

namespace {

constexpr char kTokenFileMagic[8] = {'T', 'R', 'I', 'A', 'D', 'T', 'O', 'K'};

struct Header {
  uint32_t version, dtype, vocab_size;
  uint64_t count, checksum;
};

void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }

template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size) {
  TRIAD_CHECK(vocab_size > 0, "write_token_file '" << path << "': vocab_size must be positive");
  for (size_t i = 0; i < tokens.size(); ++i)
    TRIAD_CHECK(tokens[i] < vocab_size, "write_token_file '" << path << "': token " << i << " is " << tokens[i]
                                                             << ", not below vocab_size " << vocab_size);
  const uint32_t dtype = vocab_size <= 65536 ? 2 : 4;
  std::vector<uint16_t> narrow;
  const void* data = tokens.data();
  if (dtype == 2) {
    narrow.assign(tokens.begin(), tokens.end());
    data = narrow.data();
  }
  const size_t data_bytes = tokens.size() * dtype;
  const Header h{TokenFile::kVersion, dtype, vocab_size, uint64_t(tokens.size()), fnv1a64(data, data_bytes)};
  std::string header;
  put(header, kTokenFileMagic, 8);
  put(header, &h.version, 4);
  put(header, &h.dtype, 4);
  put(header, &h.vocab_size, 4);
  put(header, &h.count, 8);
  put(header, &h.checksum, 8);
  TRIAD_ASSERT(header.size() == TokenFile::kHeaderBytes);
  write_file_atomically(path, {{header.data(), header.size()}, {data, data_bytes}}, "token file");
}

TokenFile TokenFile::open(const std::string& path) {
  TokenFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIAD_CHECK(fd >= 0, "cannot open token file '" << path << "': " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TRIAD_CHECK(false, "token file '" << path << "' is not a regular file");
  }
  const auto file_bytes = size_t(st.st_size);
  if (file_bytes < kHeaderBytes) {
    ::close(fd);
    TRIAD_CHECK(false, "token file '" << path << "' is truncated: " << file_bytes << " bytes, shorter than the "
                                      << kHeaderBytes << "-byte header");
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  TRIAD_CHECK(map != MAP_FAILED, "cannot map token file '" << path << "': " << std::strerror(err));
  f.map_ = static_cast<const unsigned char*>(map);
  f.map_bytes_ = file_bytes;  // owned from here: the destructor unmaps on any error below

  const unsigned char* p = f.map_;
  TRIAD_CHECK(std::memcmp(p, kTokenFileMagic, 8) == 0, "'" << path << "' is not a triad token file (bad magic)");
  const auto version = get<uint32_t>(p + 8);
  TRIAD_CHECK(version == kVersion, "token file '" << path << "' has version " << version << ", expected " << kVersion);
  f.dtype_ = get<uint32_t>(p + 12);
  TRIAD_CHECK(f.dtype_ == 2 || f.dtype_ == 4,
              "token file '" << path << "' has dtype " << f.dtype_ << ", expected 2 (uint16) or 4 (uint32)");
  f.vocab_size_ = get<uint32_t>(p + 16);
  TRIAD_CHECK(f.vocab_size_ > 0, "token file '" << path << "' has vocab_size 0");
  TRIAD_CHECK(f.dtype_ == 4 || f.vocab_size_ <= 65536,
              "token file '" << path << "' has vocab_size " << f.vocab_size_ << ", too large for uint16 tokens");
  const auto count = get<uint64_t>(p + 20);
  f.checksum_ = get<uint64_t>(p + 28);
  const size_t data_bytes = file_bytes - kHeaderBytes;
  TRIAD_CHECK(count <= data_bytes / f.dtype_, "token file '" << path << "' is truncated: its header says " << count
                                                             << " tokens of " << f.dtype_ << " bytes, but it holds "
                                                             << data_bytes << " bytes of tokens");
  TRIAD_CHECK(count * f.dtype_ == data_bytes, "token file '" << path << "' has " << data_bytes - count * f.dtype_
                                                             << " bytes after its " << count << " tokens");
  f.count_ = int64_t(count);

  const unsigned char* data = p + kHeaderBytes;
  const uint64_t sum = fnv1a64(data, data_bytes);
  TRIAD_CHECK(sum == f.checksum_, "token file '" << path << "' is corrupt: checksum mismatch (header " << std::hex
                                                 << f.checksum_ << ", data " << sum << ")");
  uint32_t max_token = 0;
  int64_t max_at = 0;
  for (int64_t i = 0; i < f.count_; ++i) {
    const uint32_t t = f.dtype_ == 2 ? uint32_t(get<uint16_t>(data + 2 * i)) : get<uint32_t>(data + 4 * i);
    if (t > max_token) {
      max_token = t;
      max_at = i;
    }
  }
  TRIAD_CHECK(f.count_ == 0 || max_token < f.vocab_size_, "token file '" << path << "': token " << max_at << " is "
                                                                         << max_token << ", not below vocab_size "
                                                                         << f.vocab_size_);
  return f;
}

TokenFile::TokenFile(TokenFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      count_(o.count_),
      vocab_size_(o.vocab_size_),
      dtype_(o.dtype_),
      checksum_(o.checksum_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
  o.count_ = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(count_, o.count_);
  std::swap(vocab_size_, o.vocab_size_);
  std::swap(dtype_, o.dtype_);
  std::swap(checksum_, o.checksum_);
  return *this;
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

void TokenFile::check_range(int64_t start, int64_t n) const {
  TRIAD_CHECK(start >= 0 && n >= 0 && start <= count_ && n <= count_ - start,
              "token file '" << path_ << "': read of tokens [" << start << ", " << start + n << ") is outside [0, "
                             << count_ << ")");
}

uint32_t TokenFile::at(int64_t i) const {
  check_range(i, 1);
  const unsigned char* data = map_ + kHeaderBytes;
  return dtype_ == 2 ? uint32_t(get<uint16_t>(data + 2 * i)) : get<uint32_t>(data + 4 * i);
}

void TokenFile::read(int64_t start, int64_t n, int64_t* out) const {
  check_range(start, n);
  const unsigned char* data = map_ + kHeaderBytes;
  if (dtype_ == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint16_t>(data + 2 * (start + i));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint32_t>(data + 4 * (start + i));
  }
}

}  // namespace triad::io
