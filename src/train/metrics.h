// Run outputs: metrics.jsonl (one JSON object per log step / eval), flushed as written so a
// crash loses nothing already reported.
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace eco {

class MetricsLog {
 public:
  // Opens out_dir/metrics.jsonl. When resuming at `resume_step`, records of later steps (written
  // after the checkpoint by a run that then died) are dropped so the file stays consistent.
  MetricsLog(const std::string& out_dir, bool resume, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// Write a JSON file atomically (temp + rename).
void write_json_file(const std::string& path, const nlohmann::json& j);
void write_text_file(const std::string& path, const std::string& text);

}  // namespace eco
