// Checks of user-named input files (see input_file.h).
#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace eco {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void fail(ErrorKind kind, const std::string& msg) { throw Error(kind, msg); }

// A symbolic link that stat cannot follow (err: stat's errno): "a symbolic link loop", "a
// dangling symbolic link (to TARGET)"; empty when path is no such link.
std::string broken_link(const std::string& path, int err) {
  if (err == ELOOP) return "a symbolic link loop";
  struct stat lst {};
  if (err != ENOENT || ::lstat(path.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return "";
  std::error_code ec;
  const std::string target = std::filesystem::read_symlink(path, ec).string();
  return fmt::format("a dangling symbolic link (to '{}')", clip_for_message(target));
}

}  // namespace

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (std::string link = broken_link(path, err); !link.empty()) return link;
    return err == ENOENT ? "missing" : fmt::format("unreadable ({})", std::strerror(err));
  }
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  return file_kind(st.st_mode);
}

int64_t regular_file_size(const std::string& path, const char* what, ErrorKind kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (const std::string link = broken_link(path, err); !link.empty())
      fail(kind, fmt::format("{}: is {}, not a {}", path, link, what));
    fail(kind, fmt::format("{}: cannot open {} ({})", path, what, std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) fail(kind, fmt::format("{}: is a directory, not a {}", path, what));
  if (!S_ISREG(st.st_mode))
    fail(kind, fmt::format("{}: not a regular file ({}); a {} must be one", path,
                           file_kind(st.st_mode), what));
  return int64_t(st.st_size);
}

std::string read_small_file(const std::string& path, const char* what, int64_t max_bytes) {
  const int64_t size = regular_file_size(path, what, ErrorKind::Usage);
  if (size > max_bytes)
    usage_error("{}: {} bytes, more than the limit of {} bytes for a {}", path, size, max_bytes,
                what);
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open does not hang.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) usage_error("{}: cannot open {} ({})", path, what, std::strerror(errno));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      usage_error("{}: cannot read {} ({})", path, what, std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (int64_t(text.size()) > max_bytes) {
      ::close(fd);
      usage_error("{}: more than the limit of {} bytes for a {}", path, max_bytes, what);
    }
  }
  ::close(fd);
  return text;
}

}  // namespace eco
