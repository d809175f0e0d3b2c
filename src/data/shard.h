// Token shards in llm.c's format: 256 x int32 header (magic 20240520, version, token count), then
// the tokens little-endian: version 1 = uint16 (llm.c), version 2 = uint32 (ours, vocab > 65535).
// Reading validates everything a training run relies on and names the file in every error.
#pragma once
#include <cstdint>
#include <string>
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

// Reads and checks the header against the file: magic, version 1/2, and
// file length == 1024 + num_tokens * token_bytes. Throws eco::Error (Data) naming the file.
ShardInfo read_shard_info(const std::string& path);

// read_shard_info, then reads all tokens. When vocab_size > 0, every token must be < vocab_size
// (the error names the file, the token, its position and model.vocab_size).
Shard load_shard(const std::string& path, int64_t vocab_size = 0);

// A path or a glob(3) pattern -> matching paths, sorted. No match -> data_error naming the pattern.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// Writes a shard (used by tests and tools). Tokens must fit the version (uint16 for version 1).
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int version);

}  // namespace eco
