// Reader of the tensor fixtures that tools/torch_reference.py writes: a sequence of records
// [u32 name_len][name][u32 dtype: 0=f32, 1=i32, 2=f64][u32 ndim][i64 dims...][data], all
// little-endian and row-major, ending with a record named "end". Scalars have ndim 0.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace eco::test {

static_assert(std::endian::native == std::endian::little, "fixtures are little-endian");

struct FixtureTensor {
  enum DType : uint32_t { F32 = 0, I32 = 1, F64 = 2 };
  DType dtype = F64;
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<double> f;       // f32 and f64 records, widened to double
  std::vector<int32_t> i;      // i32 records
};

class Fixture {
 public:
  // Reads the whole file; throws std::runtime_error naming the file on any problem.
  explicit Fixture(std::string path) : path_(std::move(path)) {
    std::ifstream in(path_, std::ios::binary);
    if (!in)
      throw std::runtime_error(fmt::format(
          "fixture {} not found: run `python tools/torch_reference.py` to write it", path_));
    for (;;) {
      const std::string name = read_string(in);
      FixtureTensor t;
      const uint32_t dtype = read<uint32_t>(in), ndim = read<uint32_t>(in);
      if (dtype > 2) fail(name, fmt::format("unknown dtype code {}", dtype));
      t.dtype = FixtureTensor::DType(dtype);
      int64_t count = 1;
      for (uint32_t d = 0; d < ndim; ++d) {
        t.shape.push_back(read<int64_t>(in));
        if (t.shape.back() < 0 || t.shape.back() > (int64_t(1) << 32)) fail(name, "bad dims");
        count *= t.shape.back();
      }
      for (int64_t k = 0; k < count; ++k) {
        if (t.dtype == FixtureTensor::I32) t.i.push_back(read<int32_t>(in));
        else if (t.dtype == FixtureTensor::F32) t.f.push_back(read<float>(in));
        else t.f.push_back(read<double>(in));
      }
      if (!in) fail(name, "file ends inside the record");
      if (name == "end") return;
      records_[name] = std::move(t);
    }
  }

  const std::string& path() const { return path_; }
  const std::map<std::string, FixtureTensor>& records() const { return records_; }
  bool has(const std::string& name) const { return records_.count(name) > 0; }
  const FixtureTensor& at(const std::string& name) const {
    auto it = records_.find(name);
    if (it == records_.end()) fail(name, "no such record");
    return it->second;
  }
  // A float record (f32 or f64).
  const std::vector<double>& floats(const std::string& name) const {
    const FixtureTensor& t = at(name);
    if (t.dtype == FixtureTensor::I32) fail(name, "expected a float record, found i32");
    return t.f;
  }
  const std::vector<int32_t>& ints(const std::string& name) const {
    const FixtureTensor& t = at(name);
    if (t.dtype != FixtureTensor::I32) fail(name, "expected an i32 record");
    return t.i;
  }
  double scalar(const std::string& name) const {
    const FixtureTensor& t = at(name);
    if (!t.shape.empty()) fail(name, "expected a scalar");
    return t.dtype == FixtureTensor::I32 ? double(t.i[0]) : t.f[0];
  }
  int int_scalar(const std::string& name) const {
    if (!at(name).shape.empty()) fail(name, "expected a scalar");
    return ints(name)[0];
  }

 private:
  template <class T>
  T read(std::ifstream& in) const {
    T v{};
    char buf[sizeof(T)];
    if (in.read(buf, sizeof(T))) std::memcpy(&v, buf, sizeof(T));
    return v;
  }
  std::string read_string(std::ifstream& in) const {
    const uint32_t n = read<uint32_t>(in);
    if (!in) fail("?", "file ends before the \"end\" record");
    if (n > 4096) fail("?", fmt::format("record name of {} bytes", n));
    std::string s(n, '\0');
    in.read(s.data(), n);
    return s;
  }
  [[noreturn]] void fail(const std::string& record, const std::string& why) const {
    throw std::runtime_error(fmt::format("fixture {}: record '{}': {}", path_, record, why));
  }

  std::string path_;
  std::map<std::string, FixtureTensor> records_;
};

}  // namespace eco::test
