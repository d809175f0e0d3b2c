// Tensor: a non-owning view (pointer, shape, dtype) of memory that a Backend owns.
// Quantization formats will live beside these dtypes as data, not as class hierarchies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eco {

enum class DType : uint8_t { F32, F64, BF16, I32, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    default: return 4;
  }
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
  }
  return "?";
}

struct Tensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return shape.empty() ? 0 : n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  // A view of `n` elements starting at element `offset`, with the given shape.
  Tensor slice(int64_t offset, std::vector<int64_t> new_shape) const {
    Tensor t;
    t.data = static_cast<char*>(data) + size_t(offset) * dtype_size(dtype);
    t.shape = std::move(new_shape);
    t.dtype = dtype;
    return t;
  }
};

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace eco
