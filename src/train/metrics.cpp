// metrics.jsonl handling and small atomic file writers.
#include "train/metrics.h"

#include <cerrno>
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
  for (const auto& line : kept) std::fprintf(f_, "%s\n", line.c_str());
  std::fflush(f_);
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string s = record.dump();
  std::fprintf(f_, "%s\n", s.c_str());
  std::fflush(f_);
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) runtime_error("{}: cannot open for writing", tmp);
    f << text;
    if (!f) runtime_error("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    runtime_error("{}: cannot rename into place: {}", path, std::strerror(errno));
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, j.dump(2) + "\n");
}

}  // namespace eco
