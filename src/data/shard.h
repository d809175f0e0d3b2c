// Token shards in llm.c's format: 256 x int32 header (magic 20240520, version, token count), then
// the tokens little-endian: version 1 = uint16 (llm.c), version 2 = uint32 (ours, vocab > 65535).
// Reading validates everything a training run relies on and names the file in every error.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace eco {

constexpr int32_t kShardMagic = 20240520;
constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024

struct ShardInfo {
  std::string path;
  int version;         // 1 = uint16 tokens, 2 = uint32 tokens
  int64_t num_tokens;  // header[2]
};

struct Shard {
  ShardInfo info;
  std::vector<int32_t> tokens;  // (num_tokens)
};

// Bytes per token for a shard version (1 -> 2, 2 -> 4).
int shard_token_bytes(int version);

// A shard held open for reading ranges of its tokens: the header is checked once, at the open
// (as read_shard_info does), and read() takes tokens from the file with pread, so what stays in
// memory is the ShardInfo and one file descriptor, whatever the shard's size. read() is const
// and safe from several threads at once (pread uses no shared file offset).
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);

  const ShardInfo& info() const { return info_; }

  // out (n): tokens [first, first + n) of the shard, 0 <= first, first + n <= num_tokens. Every
  // token must fit int32 and, when vocab_size > 0, be < vocab_size (the error names the file,
  // the token, its position in the shard and model.vocab_size). A read that comes back short
  // (the file was truncated after the open) is a data error naming the file, the bytes expected
  // and the file's length at the time of the read.
  void read(int64_t first, int64_t n, int64_t vocab_size, int32_t* out) const;

 private:
  // The descriptor, closed with the reader (and when the constructor throws after the open).
  struct Fd {
    int value = -1;
    Fd() = default;
    Fd(Fd&& other) noexcept : value(std::exchange(other.value, -1)) {}
    Fd& operator=(Fd&& other) noexcept {
      if (this != &other) {
        close();
        value = std::exchange(other.value, -1);
      }
      return *this;
    }
    ~Fd() { close(); }
    void close();
  };

  ShardInfo info_;
  Fd fd_;
};

// Reads and checks the header against the file: magic, version 1/2, and
// file length == 1024 + num_tokens * token_bytes. Throws eco::Error (Data) naming the file.
ShardInfo read_shard_info(const std::string& path);

// read_shard_info, then reads all tokens into memory (tests and tools; the loader streams through
// ShardReader). When vocab_size > 0, every token must be < vocab_size (the error names the file,
// the token, its position and model.vocab_size).
Shard load_shard(const std::string& path, int64_t vocab_size = 0);

// A path or a glob(3) pattern -> matching paths, sorted. No match -> data_error naming the pattern.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// Writes a shard (used by tests and tools). Tokens must fit the version (uint16 for version 1).
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int version);

}  // namespace eco
