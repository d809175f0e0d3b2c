// Token shard I/O (see shard.h). A shard is read through pread on a descriptor held open, one
// range of tokens at a time, so its tokens need not fit in memory; load_shard reads one whole.
#include "data/shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "core/input_file.h"

namespace eco {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; a big-endian host would need byte swaps");

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File open_file(const std::string& path, const char* mode, const char* what) {
  File f(std::fopen(path.c_str(), mode));
  if (!f) data_error("{}: cannot open {}: {}", path, what, std::strerror(errno));
  return f;
}

int64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) data_error("{}: cannot stat: {}", path, std::strerror(errno));
  return st.st_size;
}

// pread until `bytes` are in or the file ends; returns the bytes read (fewer at the end of file).
int64_t pread_full(int fd, void* buf, int64_t bytes, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (got < 0) {
      if (errno == EINTR) continue;
      data_error("{}: cannot read {} bytes at offset {}: {}", path, bytes, offset,
                 std::strerror(errno));
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace

int shard_token_bytes(int version) {
  if (version == 1) return 2;
  if (version == 2) return 4;
  usage_error("shard version {} is not 1 (uint16) or 2 (uint32)", version);
}

void ShardReader::Fd::close() {
  if (value >= 0) ::close(value);
  value = -1;
}

ShardReader::ShardReader(const std::string& path) {
  regular_file_size(path, "token shard", ErrorKind::Data);  // before the open a FIFO would block
  fd_.value = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_.value < 0) data_error("{}: cannot open token shard: {}", path, std::strerror(errno));
  const int64_t size = file_size(fd_.value, path);
  int32_t header[kShardHeaderInts];
  if (size < kShardHeaderBytes ||
      pread_full(fd_.value, header, kShardHeaderBytes, 0, path) != kShardHeaderBytes)
    data_error("{}: file is {} bytes, shorter than the {}-byte shard header", path, size,
               kShardHeaderBytes);
  if (header[0] != kShardMagic)
    data_error("{}: header[0] (magic) is {}, expected {} (an llm.c token shard)", path, header[0],
               kShardMagic);
  const int version = header[1];
  if (version != 1 && version != 2)
    data_error("{}: header[1] (version) is {}, expected 1 (uint16 tokens) or 2 (uint32 tokens)",
               path, version);
  const int64_t count = header[2];
  if (count < 0) data_error("{}: header[2] (token count) is {}, expected >= 0", path, count);
  const int64_t expected = kShardHeaderBytes + count * shard_token_bytes(version);
  if (size != expected)
    data_error(
        "{}: file length is {} bytes, expected {} (1024-byte header + header[2] = {} tokens "
        "x {} bytes, version {}); truncated or not a shard?",
        path, size, expected, count, shard_token_bytes(version), version);
  info_ = {path, version, count};
}

void ShardReader::read(int64_t first, int64_t n, int64_t vocab_size, int32_t* out) const {
  const std::string& path = info_.path;
  ECO_ASSERT(first >= 0 && n >= 0 && first + n <= info_.num_tokens,
             "{}: tokens [{}, {}) outside the shard's {}", path, first, first + n,
             info_.num_tokens);
  const int token_bytes = shard_token_bytes(info_.version);
  const int64_t offset = kShardHeaderBytes + first * token_bytes;
  const int64_t bytes = n * token_bytes;
  // Version 1 lands in the upper half of out's bytes and is widened in place, front to back:
  // out[i] overwrites bytes [4i, 4i + 4), below where token i + 1 onwards still wait (2n + 2i + 2).
  char* dst = reinterpret_cast<char*>(out) + (info_.version == 1 ? 2 * n : 0);
  const int64_t got = pread_full(fd_.value, dst, bytes, offset, path);
  if (got != bytes)
    data_error(
        "{}: short read: {} of {} bytes at offset {} (tokens {}..{}); the file is {} bytes, it was "
        "{} when opened: the shard changed (truncated?) after the start",
        path, got, bytes, offset, first, first + n - 1, file_size(fd_.value, path),
        kShardHeaderBytes + info_.num_tokens * token_bytes);
  if (info_.version == 1) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t t;
      std::memcpy(&t, dst + 2 * i, sizeof(t));
      out[i] = t;
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (out[i] < 0)
        data_error("{}: token {} at position {} does not fit int32", path,
                   static_cast<uint32_t>(out[i]), first + i);
  }
  if (vocab_size > 0) {
    for (int64_t i = 0; i < n; ++i)
      if (out[i] >= vocab_size)
        data_error("{}: token {} at position {} is >= model.vocab_size {}", path, out[i], first + i,
                   vocab_size);
  }
}

ShardInfo read_shard_info(const std::string& path) { return ShardReader(path).info(); }

Shard load_shard(const std::string& path, int64_t vocab_size) {
  const ShardReader reader(path);
  Shard shard{reader.info(), std::vector<int32_t>(reader.info().num_tokens)};
  reader.read(0, shard.info.num_tokens, vocab_size, shard.tokens.data());
  return shard;
}

std::vector<std::string> expand_shard_pattern(const std::string& pattern) {
  if (pattern.empty()) usage_error("empty shard path/pattern");
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    data_error("{}: no token shard matches this path/pattern", pattern);
  if (rc != 0) data_error("{}: glob failed (code {}): cannot read the directory?", pattern, rc);
  std::sort(paths.begin(), paths.end());
  return paths;
}

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int version) {
  const int token_bytes = shard_token_bytes(version);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    usage_error("{}: {} tokens do not fit the int32 header count", path, tokens.size());
  const int64_t max_token = version == 1 ? 65535 : INT32_MAX;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] > max_token)
      usage_error("{}: token {} at position {} does not fit a version {} shard", path, tokens[i], i,
                  version);
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  File f = open_file(path, "wb", "token shard for writing");
  bool ok = std::fwrite(header, sizeof(header), 1, f.get()) == 1;
  if (version == 1) {
    std::vector<uint16_t> raw(tokens.begin(), tokens.end());
    ok = ok && std::fwrite(raw.data(), token_bytes, raw.size(), f.get()) == raw.size();
  } else {
    ok = ok && std::fwrite(tokens.data(), token_bytes, tokens.size(), f.get()) == tokens.size();
  }
  ok = (std::fflush(f.get()) == 0) && ok;
  if (!ok) data_error("{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace eco
