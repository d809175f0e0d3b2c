// The tokenizer's decode table written by data/prepare.py, so eco-train can print samples as text.
// File: uint32 magic 0x45434F44 ("ECOD"), uint32 vocab_size, then per token id 0..vocab_size-1:
// uint32 byte_length, then that many raw bytes (little-endian throughout).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace eco {

constexpr uint32_t kDecodeTableMagic = 0x45434F44;

class DecodeTable {
 public:
  // Bad magic, truncation or trailing bytes -> data_error naming the file.
  static DecodeTable load(const std::string& path);
  // From in-memory token strings (token id i -> tokens[i]); e.g. the synthetic corpus' syllables.
  static DecodeTable from_tokens(std::vector<std::string> tokens);

  // Concatenated bytes of the tokens. Ids outside the table (a model vocabulary padded past the
  // tokenizer's) render as "<|id|>" rather than failing: this is for display.
  std::string decode(const int32_t* tokens, size_t n) const;
  const std::string& token_bytes(int32_t id) const { return tokens_.at(id); }
  int vocab_size() const { return static_cast<int>(tokens_.size()); }

 private:
  std::vector<std::string> tokens_;
};

}  // namespace eco
