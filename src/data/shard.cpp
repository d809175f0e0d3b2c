// Token shard I/O (see shard.h). The whole shard is read into memory with one fread: our
// datasets are small, and a vector keeps the loader trivially thread-safe.
#include "data/shard.h"

#include <glob.h>

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

int64_t file_size(std::FILE* f, const std::string& path) {
  if (std::fseek(f, 0, SEEK_END) != 0)
    data_error("{}: cannot seek: {}", path, std::strerror(errno));
  const long size = std::ftell(f);
  if (size < 0) data_error("{}: cannot tell size: {}", path, std::strerror(errno));
  std::rewind(f);
  return size;
}

}  // namespace

int shard_token_bytes(int version) {
  if (version == 1) return 2;
  if (version == 2) return 4;
  usage_error("shard version {} is not 1 (uint16) or 2 (uint32)", version);
}

ShardInfo read_shard_info(const std::string& path) {
  regular_file_size(path, "token shard", ErrorKind::Data);  // before the open a FIFO would block
  File f = open_file(path, "rb", "token shard");
  const int64_t size = file_size(f.get(), path);
  int32_t header[kShardHeaderInts];
  if (size < kShardHeaderBytes || std::fread(header, sizeof(header), 1, f.get()) != 1)
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
  return {path, version, count};
}

Shard load_shard(const std::string& path, int64_t vocab_size) {
  Shard shard{read_shard_info(path), {}};
  const int64_t n = shard.info.num_tokens;
  File f = open_file(path, "rb", "token shard");
  if (std::fseek(f.get(), kShardHeaderBytes, SEEK_SET) != 0)
    data_error("{}: cannot seek past the header: {}", path, std::strerror(errno));
  shard.tokens.resize(n);
  if (shard.info.version == 1) {
    std::vector<uint16_t> raw(n);
    if (std::fread(raw.data(), sizeof(uint16_t), n, f.get()) != static_cast<size_t>(n))
      data_error("{}: short read of {} uint16 tokens", path, n);
    std::copy(raw.begin(), raw.end(), shard.tokens.begin());
  } else {
    std::vector<uint32_t> raw(n);
    if (std::fread(raw.data(), sizeof(uint32_t), n, f.get()) != static_cast<size_t>(n))
      data_error("{}: short read of {} uint32 tokens", path, n);
    for (int64_t i = 0; i < n; ++i) {
      if (raw[i] > static_cast<uint32_t>(INT32_MAX))
        data_error("{}: token {} at position {} does not fit int32", path, raw[i], i);
      shard.tokens[i] = static_cast<int32_t>(raw[i]);
    }
  }
  if (vocab_size > 0) {
    for (int64_t i = 0; i < n; ++i)
      if (shard.tokens[i] >= vocab_size)
        data_error("{}: token {} at position {} is >= model.vocab_size {}", path, shard.tokens[i],
                   i, vocab_size);
  }
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
