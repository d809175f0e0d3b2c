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
// "PATH: not a regular file (a FIFO); a WHAT must be one". `what`: "config file", "token shard".
int64_t regular_file_size(const std::string& path, const char* what, ErrorKind kind);

// The whole regular file at `path`, refused (kind Usage) beyond `max_bytes`.
std::string read_small_file(const std::string& path, const char* what, int64_t max_bytes);

}  // namespace eco
