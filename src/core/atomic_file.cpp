// AtomicFile: temp file, checked writes, fsync, close, rename, directory fsync.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace eco {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) runtime_error("{}: cannot open for writing: {}", tmp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed, or failed (and cleaned up) already
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const char* what, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  runtime_error("{}: {} failed: {}", tmp_, what, std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write", errno);
    c += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("fsync", errno);  // EINVAL: cannot sync
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    runtime_error("{}: close failed: {}", tmp_, std::strerror(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    runtime_error("{}: cannot rename into place: {}", path_, std::strerror(err));
  }
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace eco
