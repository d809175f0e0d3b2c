// safetensors: header parsing with every check of the specification, tensor reads, the writer.
#include "hf/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/atomic_file.h"
#include "base/error.h"
#include "core/input_file.h"
#include "base/math/bf16.h"

namespace eco {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

struct DTypeInfo {
  StDType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},           {StDType::I8, "I8", 1},
    {StDType::U16, "U16", 2},   {StDType::I16, "I16", 2},         {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::U32, "U32", 4},         {StDType::I32, "I32", 4},
    {StDType::F32, "F32", 4},   {StDType::U64, "U64", 8},         {StDType::I64, "I64", 8},
    {StDType::F64, "F64", 8},   {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1},
};

// nlohmann keeps the last of two equal keys without a word: this callback sees every key of
// every object as it is parsed and refuses a repeat.
class DuplicateKeyGuard {
 public:
  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      keys_.emplace_back();
    } else if (event == E::object_end) {
      keys_.pop_back();
    } else if (event == E::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys_.back().insert(k).second && duplicate_.empty()) duplicate_ = k;
    }
    return true;
  }
  std::string duplicate_;

 private:
  std::vector<std::set<std::string>> keys_;
};

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}
size_t st_dtype_size(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}
bool st_dtype_is_float_weight(StDType t) {
  return t == StDType::F32 || t == StDType::BF16 || t == StDType::F16;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t SafetensorsOutput::bytes() const {
  uint64_t n = st_dtype_size(dtype);
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (man << 13));  // inf, NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
  // Zero and subnormals: man x 2^-24, exact in float.
  const float v = float(man) * 0x1.0p-24f;
  return sign ? -v : v;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const int64_t size = regular_file_size(path_, "safetensors file", ErrorKind::Data);
  const std::string& p = path_;
  if (size < 8)
    data_error("{}: truncated safetensors file ({} bytes; the header length alone takes 8)", p,
               size);
  std::ifstream in(p, std::ios::binary);
  if (!in) data_error("{}: cannot open safetensors file", p);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t n = read_u64_le(len_bytes);
  if (n > kSafetensorsMaxHeader)
    data_error("{}: header length {} exceeds the format's limit of {} bytes", p, n,
               kSafetensorsMaxHeader);
  if (n > uint64_t(size) - 8)
    data_error("{}: header length {} runs past the end of the file ({} bytes after the length "
               "field): truncated or not a safetensors file",
               p, n, uint64_t(size) - 8);
  if (n < 2) data_error("{}: header of {} bytes cannot hold a JSON object", p, n);
  std::string header(n, '\0');
  if (!in.read(header.data(), std::streamsize(n))) data_error("{}: cannot read the header", p);
  if (header[0] != '{')
    data_error("{}: the header does not start with a JSON object ('{{'), it starts with byte "
               "0x{:02x}",
               p, uint8_t(header[0]));
  DuplicateKeyGuard guard;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, std::ref(guard));
  } catch (const nlohmann::json::exception& e) {
    data_error("{}: the header is not valid JSON ({})", p, e.what());
  }
  if (!guard.duplicate_.empty())
    data_error("{}: the header names '{}' twice", p, clip_for_message(guard.duplicate_));
  if (!j.is_object()) data_error("{}: the header is not a JSON object", p);
  data_start_ = 8 + n;
  const uint64_t data_size = uint64_t(size) - data_start_;

  for (const auto& [name, v] : j.items()) {
    const std::string shown = clip_for_message(name);
    if (name == "__metadata__") {
      if (!v.is_object()) data_error("{}: __metadata__ is not an object of strings", p);
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          data_error("{}: __metadata__ '{}' is not a string", p, clip_for_message(k));
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    if (name.empty()) data_error("{}: a tensor has an empty name", p);
    if (!v.is_object())
      data_error("{}: tensor '{}': expected an object with dtype, shape and data_offsets", p,
                 shown);
    for (const auto& [k, unused] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        data_error("{}: tensor '{}': unknown key '{}' (expected dtype, shape, data_offsets)", p,
                   shown, clip_for_message(k));
    SafetensorsEntry e;
    e.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string())
      data_error("{}: tensor '{}': dtype missing or not a string", p, shown);
    const std::string dt = v["dtype"].get<std::string>();
    const auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                    [&](const DTypeInfo& d) { return dt == d.name; });
    if (known == std::end(kDTypes))
      data_error("{}: tensor '{}': unknown dtype '{}'", p, shown, clip_for_message(dt));
    e.dtype = known->t;
    if (!v.contains("shape") || !v["shape"].is_array())
      data_error("{}: tensor '{}': shape missing or not an array", p, shown);
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned())
        data_error("{}: tensor '{}': shape {} holds something other than non-negative integers",
                   p, shown, clip_for_message(v["shape"].dump()));
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t(1) << 40) || (dim > 0 && numel > (uint64_t(1) << 50) / dim))
        data_error("{}: tensor '{}': shape {} is too large", p, shown,
                   clip_for_message(v["shape"].dump()));
      numel *= dim;
      e.shape.push_back(int64_t(dim));
    }
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      data_error("{}: tensor '{}': data_offsets must be [begin, end], two non-negative integers",
                 p, shown);
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin)
      data_error("{}: tensor '{}': data_offsets [{}, {}] end before they begin", p, shown,
                 e.begin, e.end);
    if (e.end > data_size)
      data_error("{}: tensor '{}': data_offsets [{}, {}] run past the data region of {} bytes "
                 "(truncated file, or a header that lies)",
                 p, shown, e.begin, e.end, data_size);
    const uint64_t want = numel * st_dtype_size(e.dtype);
    if (e.end - e.begin != want)
      data_error("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} "
                 "takes {}",
                 p, shown, e.begin, e.end, e.end - e.begin, clip_for_message(v["shape"].dump()),
                 dt, want);
    entries_.push_back(std::move(e));
  }
  // The byte ranges tile the data region: sorted by begin, each starts where the previous ended,
  // the first at 0 and the last ends at the end of the file. (Empty tensors sit anywhere a
  // boundary is.)
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t at = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries_) {
    if (e.begin < at)
      data_error("{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", p,
                 clip_for_message(prev->name), clip_for_message(e.name), prev->begin, prev->end,
                 e.begin, e.end);
    if (e.begin > at)
      data_error("{}: a gap in the data region: bytes [{}, {}) before tensor '{}' belong to no "
                 "tensor",
                 p, at, e.begin, clip_for_message(e.name));
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    data_error("{}: the data region has {} bytes, but the tensors end at byte {} ({} bytes belong "
               "to no tensor)",
               p, data_size, at, data_size - at);
  for (size_t i = 0; i < entries_.size(); ++i) by_name_[entries_[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

std::vector<char> SafetensorsFile::read_bytes(const SafetensorsEntry& e) const {
  std::vector<char> out(e.end - e.begin);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(data_start_ + e.begin));
  if (!in || !in.read(out.data(), std::streamsize(out.size())))
    data_error("{}: cannot read tensor '{}' ({} bytes at offset {}): the file changed or is "
               "truncated",
               path_, e.name, out.size(), data_start_ + e.begin);
  return out;
}

std::vector<float> SafetensorsFile::read_floats(const SafetensorsEntry& e) const {
  if (!st_dtype_is_float_weight(e.dtype))
    usage_error("{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", path_, e.name,
                st_dtype_name(e.dtype));
  const std::vector<char> raw = read_bytes(e);
  std::vector<float> out(size_t(e.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (e.dtype == StDType::F32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = e.dtype == StDType::BF16 ? bf16_to_float(h) : f16_to_float(h);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsOutput*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    const size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const SafetensorsOutput* t : order) {
    ECO_ASSERT(!header.contains(t->name), "safetensors: tensor '{}' written twice", t->name);
    header[t->name] = {{"dtype", st_dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {at, at + t->bytes()}}};
    at += t->bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  const uint64_t n = text.size();
  file.write(&n, 8);
  file.write(text.data(), text.size());
  std::vector<char> buf;
  for (const SafetensorsOutput* t : order) {
    buf.assign(t->bytes(), 0);
    t->fill(buf.data());
    file.write(buf.data(), buf.size());
  }
  file.commit();
}

}  // namespace eco
