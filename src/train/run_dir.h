// The run directory (train.out_dir) and the files written into it: config.resolved.yaml,
// checkpoints (written, pruned, the latest found for --resume), samples.txt and summary.json.
// Only the lead rank writes; on the other ranks every write is a no-op.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "train/checkpoint.h"
#include "train/run_context.h"

namespace eco {

class RunDir {
 public:
  RunDir(std::string path, RunContext ctx) : path_(std::move(path)), ctx_(ctx) {}

  const std::string& path() const { return path_; }
  bool writes() const { return ctx_.is_lead(); }

  // Creates the directory and checks that it is writable (a usage error naming train.out_dir
  // otherwise).
  void prepare() const;
  void write_resolved_config(const std::string& yaml) const;
  // Writes ckpt_<step>.bin atomically, then keeps only the newest `keep`; returns its path.
  std::string save_checkpoint(const CheckpointState& state, int keep) const;
  // The newest checkpoint in the directory, "" if none (every rank may read).
  std::string latest_checkpoint() const;
  // Appends "=== step N ===" and the sample to samples.txt (best effort, as a log is).
  void append_sample(int64_t step, const std::string& text) const;
  void write_summary(const nlohmann::json& summary) const;

 private:
  std::string file(const char* name) const;

  std::string path_;
  RunContext ctx_;
};

}  // namespace eco
