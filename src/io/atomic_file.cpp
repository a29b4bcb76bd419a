#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tensor/error.h"

namespace triad::io {

void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts,
                           const char* what) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIAD_CHECK(fd >= 0, "cannot create '" << tmp << "' (for " << what << " '" << path << "'): " << std::strerror(errno));
  const auto fail = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    TRIAD_CHECK(false, "cannot write " << what << " '" << path << "': " << std::strerror(err));
  };
  for (const auto& [data, n] : parts) {
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd, static_cast<const char*>(data) + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(w < 0 ? errno : EIO);
      done += size_t(w);
    }
  }
  if (::fsync(fd) != 0) fail(errno);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TRIAD_CHECK(false, "cannot write " << what << " '" << path << "': " << std::strerror(err));
  }
}

}  // namespace triad::io
