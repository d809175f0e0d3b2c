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
  // after the checkpoint by a run that then died) and a torn last line are dropped, so that each
  // step's records appear once: the file is rewritten atomically (temp file and rename), then
  // appended to.
  MetricsLog(const std::string& out_dir, bool resume, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // Appends one line and flushes it; a failed write (a full disk) is an error naming the file.
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// The value of `key` in out_dir/metrics.jsonl's record of `step` (the last such record); null
// when there is none.
nlohmann::json recorded_value(const std::string& out_dir, int64_t step, const char* key);
// The same for a number; NaN when there is none.
double recorded_metric(const std::string& out_dir, int64_t step, const char* key);

// Write a file atomically (temp file, fsync, rename); any failed write, fsync or close is an error
// naming the file, and leaves no temp file behind.
void write_json_file(const std::string& path, const nlohmann::json& j);
void write_text_file(const std::string& path, const std::string& text);

}  // namespace eco
