// Files a user names (config, token shards, decode tables, checkpoints) are checked before they
// are opened: a directory, a FIFO (which would block the open forever) or a device (/dev/zero,
// endless) is refused with one line naming the path and what was expected.
#pragma once
#include <cstdint>
#include <string>

#include "base/error.h"

namespace eco {

// The size of the regular file at `path` (symlinks followed). Otherwise an error of `kind`:
// "PATH: cannot open WHAT (No such file or directory)", "PATH: is a directory, not a WHAT",
// "PATH: not a regular file (a FIFO); a WHAT must be one", "PATH: is a symbolic link loop, not a
// WHAT", "PATH: is a dangling symbolic link (to TARGET), not a WHAT". `what`: "config file",
// "token shard".
int64_t regular_file_size(const std::string& path, const char* what, ErrorKind kind);

// What is at `path` when it is not a regular file, for a message: "missing", "a directory",
// "a FIFO", "a character device", "a block device", "a socket", "a symbolic link loop",
// "a dangling symbolic link (to TARGET)" or "unreadable (REASON)"; empty for a regular file
// (symlinks followed). Only stat and lstat: a FIFO is never opened.
std::string non_regular_kind(const std::string& path);

// The whole regular file at `path`, refused (kind Usage) beyond `max_bytes`.
std::string read_small_file(const std::string& path, const char* what, int64_t max_bytes);

}  // namespace eco
