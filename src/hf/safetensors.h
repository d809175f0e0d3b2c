// The safetensors format (Hugging Face), read and written to its specification:
//   u64 N (little-endian) | N bytes of JSON header | data
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data region) and may hold "__metadata__" (string -> string). The tensors' byte ranges
// tile the data region exactly: no gap, no overlap, nothing after the last. The reader checks all
// of it before any tensor is used; every violation is one data error naming the file and what is
// wrong. Tensors are read one at a time (the file is not held in memory).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace eco {

// The dtypes of the specification. Reading converts F32, BF16 and F16 to float; the others are
// known (a file holding them is valid) but are not weights ecotrain reads, except U8 codes.
enum class StDType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64,
                               F8_E4M3, F8_E5M2 };
const char* st_dtype_name(StDType t);  // "F32", "BF16", ...
size_t st_dtype_size(StDType t);
// Whether read_floats converts this dtype (F32, BF16, F16).
bool st_dtype_is_float_weight(StDType t);

struct SafetensorsEntry {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // empty: a scalar (one element)
  uint64_t begin = 0, end = 0;  // bytes, relative to the data region
  int64_t numel() const;
};

// The header's limit in bytes (the reference implementation's: 100 MB).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsFile {
 public:
  // Reads and validates the header of `path` (the size of the file included).
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  // Sorted by data offset (the order of the data region).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes as stored (little-endian).
  std::vector<char> read_bytes(const SafetensorsEntry& e) const;
  // The tensor as float: F32 as is, BF16 and F16 widened exactly; another dtype is a usage
  // error naming the tensor and the dtypes accepted.
  std::vector<float> read_floats(const SafetensorsEntry& e) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + N
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: its bytes are produced when the writer reaches it, so that a large model is
// never held twice in memory. fill writes exactly numel x st_dtype_size(dtype) bytes.
struct SafetensorsOutput {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  std::function<void(char* dst)> fill;
  uint64_t bytes() const;
};

// Writes one safetensors file atomically (temp file, fsync, rename). Tensors are laid out by
// element size, largest first (then by name), so every tensor starts at a multiple of its element
// size; the header is padded with spaces to a multiple of 8 bytes (the data then starts 8-byte
// aligned, as the reference writer does). Duplicate names are an internal error.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// IEEE half -> float, exact (subnormals, infinities and NaN included).
float f16_to_float(uint16_t h);

}  // namespace eco
