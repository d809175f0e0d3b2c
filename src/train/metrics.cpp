// metrics.jsonl handling and small atomic file writers.
#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace eco {

MetricsLog::MetricsLog(const std::string& out_dir, bool resume, int64_t resume_step)
    : path_(out_dir + "/metrics.jsonl") {
  std::vector<std::string> kept;
  if (resume) {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.value("step", int64_t(0)) <= resume_step) kept.push_back(line);
      } catch (const nlohmann::json::exception&) {
        // A torn last line from a crash: drop it.
      }
    }
  }
  f_ = std::fopen(path_.c_str(), "w");
  if (!f_) runtime_error("{}: cannot open for writing: {}", path_, std::strerror(errno));
  bool ok = true;
  for (const auto& line : kept) ok = std::fprintf(f_, "%s\n", line.c_str()) >= 0 && ok;
  if (std::fflush(f_) != 0 || !ok)
    runtime_error("{}: write failed: {}", path_, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);  // every record was flushed (and checked) as written
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string s = record.dump();
  if (std::fprintf(f_, "%s\n", s.c_str()) < 0 || std::fflush(f_) != 0)
    runtime_error("{}: write failed: {}", path_, std::strerror(errno));
}

double recorded_metric(const std::string& out_dir, int64_t step, const char* key) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  double value = std::nan("");
  for (std::string line; std::getline(in, line);) {
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t(-1)) == step && j.contains(key) && j[key].is_number())
        value = j[key].get<double>();
    } catch (const nlohmann::json::exception&) {
      // A torn line from a crash: not a record.
    }
  }
  return value;
}

void write_text_file(const std::string& path, const std::string& text) {
  // Temp file, every write and the fsync and close checked, then rename: a full disk is an
  // error naming the file, never a silently empty or torn one.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) runtime_error("{}: cannot open for writing: {}", tmp, std::strerror(errno));
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    runtime_error("{}: {} failed: {}", tmp, what, std::strerror(err));
  };
  for (size_t done = 0; done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write");
    done += size_t(w);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail("fsync");  // EINVAL: a file that cannot sync
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    runtime_error("{}: close failed: {}", tmp, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    runtime_error("{}: cannot rename into place: {}", path, std::strerror(err));
  }
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, j.dump(2) + "\n");
}

}  // namespace eco
