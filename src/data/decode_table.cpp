// Decode table loading (see decode_table.h).
#include "data/decode_table.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "core/input_file.h"

namespace eco {

DecodeTable DecodeTable::load(const std::string& path) {
  regular_file_size(path, "decode table", ErrorKind::Data);  // before the open a FIFO would block
  std::ifstream in(path, std::ios::binary);
  if (!in) data_error("{}: cannot open decode table: {}", path, std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) data_error("{}: read error", path);

  size_t pos = 0;
  const auto read_u32 = [&](const char* field) {
    if (bytes.size() - pos < 4)
      data_error("{}: decode table truncated at byte {} reading {} (file is {} bytes)", path, pos,
                 field, bytes.size());
    uint32_t v;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  };
  const uint32_t magic = read_u32("magic");
  if (magic != kDecodeTableMagic)
    data_error("{}: decode table magic is {:#010x}, expected {:#010x} (\"ECOD\")", path, magic,
               kDecodeTableMagic);
  const uint32_t vocab = read_u32("vocab_size");
  if (vocab > (1u << 28)) data_error("{}: decode table vocab_size {} is implausible", path, vocab);
  DecodeTable table;
  table.tokens_.reserve(vocab);
  for (uint32_t id = 0; id < vocab; ++id) {
    const uint32_t len = read_u32("a token length");
    if (bytes.size() - pos < len)
      data_error("{}: decode table truncated in token {} ({} bytes needed at byte {}, file is {})",
                 path, id, len, pos, bytes.size());
    table.tokens_.emplace_back(bytes, pos, len);
    pos += len;
  }
  if (pos != bytes.size())
    data_error("{}: decode table has {} trailing bytes after vocab_size {} tokens", path,
               bytes.size() - pos, vocab);
  return table;
}

DecodeTable DecodeTable::from_tokens(std::vector<std::string> tokens) {
  DecodeTable table;
  table.tokens_ = std::move(tokens);
  return table;
}

std::string DecodeTable::decode(const int32_t* tokens, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = tokens[i];
    if (id >= 0 && static_cast<size_t>(id) < tokens_.size())
      out += tokens_[id];
    else
      out += "<|" + std::to_string(id) + "|>";
  }
  return out;
}

}  // namespace eco
