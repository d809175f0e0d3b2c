// Checkpoint file format (little-endian), version 2:
//   "ECOCKPT\0" | u32 version | i64 step | i64 tokens | str fingerprint | str config_yaml |
//   u32 n_sections | n x (str name | u64 bytes | bytes) |
//   u32 n_losses | n_losses x f64 | f64 lowest_median | u32 crc32 of everything before
// where str = u64 length + bytes, and the losses and lowest_median are the loss-spike detector's
// window and lowest running median (+inf when the window is empty). Version 1 is the same without
// the loss-spike record.
#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/atomic_file.h"
#include "core/config.h"
#include "base/error.h"
#include "core/input_file.h"

namespace eco {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'E', 'C', 'O', 'C', 'K', 'P', 'T', '\0'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kFirstVersion = 1;  // no loss-spike record

// Writes through an AtomicFile, keeping the running CRC32 of every byte.
class Writer {
 public:
  explicit Writer(AtomicFile& file) : file_(file) {}
  void bytes(const void* p, size_t n) {
    if (n == 0) return;  // crc32_z(crc, nullptr, 0) would reset the running checksum
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
    file_.write(p, n);
  }
  template <class T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  uLong crc() const { return crc_; }

 private:
  AtomicFile& file_;
  uLong crc_ = crc32_z(0L, Z_NULL, 0);
};

class Reader {
 public:
  Reader(const std::vector<char>& buf, const std::string& path) : buf_(buf), path_(path) {}
  void bytes(void* dst, size_t n) {
    if (n > buf_.size() - pos_)
      runtime_error("{}: checkpoint is truncated (needs {} more bytes at offset {})", path_,
                    n - (buf_.size() - pos_), pos_);
    std::memcpy(dst, buf_.data() + pos_, n);
    pos_ += n;
  }
  template <class T>
  T pod() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t n = pod<uint64_t>();
    if (n > buf_.size() - pos_) runtime_error("{}: checkpoint is truncated or corrupt", path_);
    std::string s(buf_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<char>& buf_;
  const std::string& path_;
  size_t pos_ = 0;
};

// The loss-spike record: at most a window's worth of finite losses, and a finite lowest median
// (+inf exactly when there are none).
LossSpikeDetector::State read_loss_spikes(Reader& r, const std::string& path) {
  LossSpikeDetector::State s;
  const uint32_t n = r.pod<uint32_t>();
  if (n > ConfigLimits::kMaxSpikeWindow)
    runtime_error("{}: corrupt checkpoint: a loss-spike window of {} losses (at most {})", path, n,
                  ConfigLimits::kMaxSpikeWindow);
  s.recent.resize(n);
  for (double& loss : s.recent) {
    loss = r.pod<double>();
    if (!std::isfinite(loss))
      runtime_error("{}: corrupt checkpoint: the loss-spike window holds {}", path, loss);
  }
  s.lowest_median = r.pod<double>();
  const bool plausible = n > 0 ? std::isfinite(s.lowest_median)
                               : s.lowest_median == std::numeric_limits<double>::infinity();
  if (!plausible)
    runtime_error("{}: corrupt checkpoint: lowest running loss median {} for {} losses", path,
                  s.lowest_median, n);
  return s;
}

}  // namespace

const std::vector<char>& CheckpointState::section(const std::string& name,
                                                  const std::string& path) const {
  for (const auto& [n, blob] : sections)
    if (n == name) return blob;
  runtime_error("{}: checkpoint has no section '{}'", path, name);
}

void save_checkpoint(const std::string& path, const CheckpointState& st) {
  AtomicFile file(path);
  Writer w(file);
  w.bytes(kMagic, sizeof kMagic);
  w.pod<uint32_t>(kVersion);
  w.pod<int64_t>(st.step);
  w.pod<int64_t>(st.tokens);
  w.str(st.fingerprint);
  w.str(st.config_yaml);
  w.pod<uint32_t>(uint32_t(st.sections.size()));
  for (const auto& [name, blob] : st.sections) {
    w.str(name);
    w.pod<uint64_t>(blob.size());
    w.bytes(blob.data(), blob.size());
  }
  w.pod<uint32_t>(uint32_t(st.loss_spikes.recent.size()));
  for (double loss : st.loss_spikes.recent) w.pod<double>(loss);
  w.pod<double>(st.loss_spikes.lowest_median);
  const uint32_t crc = uint32_t(w.crc());
  w.bytes(&crc, sizeof crc);
  file.commit();
}

CheckpointState load_checkpoint(const std::string& path) {
  regular_file_size(path, "checkpoint", ErrorKind::Internal);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) runtime_error("{}: cannot open checkpoint", path);
  const std::streamsize size = f.tellg();
  f.seekg(0);
  std::vector<char> buf(size_t(std::max<std::streamsize>(size, 0)));
  if (!f.read(buf.data(), size)) runtime_error("{}: cannot read checkpoint", path);
  if (buf.size() < sizeof kMagic + 4 || std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0)
    runtime_error("{}: not an ecotrain checkpoint (bad magic)", path);
  uint32_t stored_crc;
  std::memcpy(&stored_crc, buf.data() + buf.size() - 4, 4);
  const uint32_t crc = uint32_t(crc32_z(crc32_z(0L, Z_NULL, 0),
                                        reinterpret_cast<const Bytef*>(buf.data()),
                                        buf.size() - 4));
  if (crc != stored_crc)
    runtime_error("{}: checkpoint is corrupt or truncated (checksum {:08x}, expected {:08x})",
                  path, crc, stored_crc);
  Reader r(buf, path);
  char magic[8];
  r.bytes(magic, 8);
  const uint32_t version = r.pod<uint32_t>();
  if (version < kFirstVersion || version > kVersion)
    runtime_error("{}: checkpoint version {} is not supported (expected {} to {})", path, version,
                  kFirstVersion, kVersion);
  CheckpointState st;
  st.step = r.pod<int64_t>();
  st.tokens = r.pod<int64_t>();
  // A CRC-valid file can still hold values no run writes (a bug, a hand-edited file).
  if (st.step < 0 || st.step > ConfigLimits::kMaxSteps)
    runtime_error("{}: corrupt checkpoint: step {}", path, st.step);
  if (st.tokens < 0) runtime_error("{}: corrupt checkpoint: tokens {}", path, st.tokens);
  st.fingerprint = r.str();
  st.config_yaml = r.str();
  const uint32_t n = r.pod<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    std::string name = r.str();
    const uint64_t bytes = r.pod<uint64_t>();
    if (bytes > buf.size() - r.pos()) runtime_error("{}: checkpoint section '{}' is truncated", path, name);
    std::vector<char> blob(bytes);
    r.bytes(blob.data(), bytes);
    st.sections.emplace_back(std::move(name), std::move(blob));
  }
  if (version >= 2) st.loss_spikes = read_loss_spikes(r, path);
  if (r.pos() != buf.size() - 4)
    runtime_error("{}: checkpoint has {} unexpected trailing bytes", path, buf.size() - 4 - r.pos());
  return st;
}

std::string checkpoint_name(int64_t step) { return fmt::format("ckpt_{:08d}.bin", step); }

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // ckpt_<at least 8 digits>.bin (checkpoint_name pads to 8 and grows beyond).
    if (name.size() < 17 || name.rfind("ckpt_", 0) != 0 ||
        name.substr(name.size() - 4) != ".bin")
      continue;
    const std::string digits = name.substr(5, name.size() - 9);
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.emplace_back(std::stoll(digits), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string latest_checkpoint(const std::string& dir) {
  const auto all = list_checkpoints(dir);
  return all.empty() ? std::string() : all.back().second;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep) {
  const auto all = list_checkpoints(dir);
  std::vector<std::string> removed;
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) {
    std::error_code ec;
    if (fs::remove(all[i].second, ec)) removed.push_back(all[i].second);
  }
  return removed;
}

}  // namespace eco
