// metrics.jsonl handling and small atomic file writers.
#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "base/error.h"

namespace eco {

MetricsLog::MetricsLog(const std::string& out_dir, bool resume, int64_t resume_step)
    : path_(out_dir + "/metrics.jsonl") {
  if (resume) {
    // The records up to the checkpoint, put in place at once: a run killed here leaves the old
    // file or the new one, never a part.
    std::string kept;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.is_object() && j.value("step", int64_t(0)) <= resume_step) kept += line + "\n";
      } catch (const nlohmann::json::exception&) {
        // A torn last line from a crash: drop it.
      }
    }
    in.close();
    write_text_file(path_, kept);
  }
  f_ = std::fopen(path_.c_str(), resume ? "a" : "w");
  if (!f_) runtime_error("{}: cannot open for writing: {}", path_, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);  // every record was flushed (and checked) as written
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string s = record.dump();
  if (std::fprintf(f_, "%s\n", s.c_str()) < 0 || std::fflush(f_) != 0)
    runtime_error("{}: write failed: {}", path_, std::strerror(errno));
}

nlohmann::json recorded_value(const std::string& out_dir, int64_t step, const char* key) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  nlohmann::json value;
  for (std::string line; std::getline(in, line);) {
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.value("step", int64_t(-1)) == step && j.contains(key))
        value = j[key];
    } catch (const nlohmann::json::exception&) {
      // A torn line from a crash: not a record.
    }
  }
  return value;
}

double recorded_metric(const std::string& out_dir, int64_t step, const char* key) {
  const nlohmann::json value = recorded_value(out_dir, step, key);
  return value.is_number() ? value.get<double>() : std::nan("");
}

void write_text_file(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, j.dump(2) + "\n");
}

}  // namespace eco
