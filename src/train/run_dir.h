// The run directory (train.out_dir) and the files written into it: config.resolved.yaml,
// checkpoints (written, pruned, the latest found for --resume), samples.txt and summary.json.
// Only the lead rank writes; on the other ranks every write is a no-op. The lead rank holds an
// exclusive lock on the directory (flock on .eco-train.lock, which holds its pid) for as long
// as the RunDir lives, so two runs never write one directory.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.h"
#include "train/run_context.h"

namespace eco {

class RunDir {
 public:
  RunDir(std::string path, RunContext ctx) : path_(std::move(path)), ctx_(ctx) {}
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  bool writes() const { return ctx_.is_lead(); }

  // Creates the directory and checks that it is writable (a usage error naming train.out_dir
  // otherwise), takes its lock (a usage error naming the holder's pid when another run has it),
  // and removes the temp files (*.tmp) that a killed write left; returns their names.
  std::vector<std::string> prepare();
  // Deletes an earlier run's files: its checkpoints except `keep` (a path, or ""), metrics.jsonl,
  // samples.txt and summary.json (--overwrite).
  void remove_previous_run(const std::string& keep) const;
  void write_resolved_config(const std::string& yaml) const;
  // Writes ckpt_<step>.bin atomically, then keeps only the newest `keep`; returns its path.
  std::string save_checkpoint(const CheckpointState& state, int keep) const;
  // Deletes all but the newest `keep` checkpoints; returns the paths deleted.
  std::vector<std::string> prune_checkpoints(int keep) const;
  // The checkpoints in the directory as (step, path), oldest first (every rank may read).
  std::vector<std::pair<int64_t, std::string>> checkpoints() const;
  // Renames a checkpoint that failed to load to <name>.corrupt, so that it no longer counts as
  // the newest; returns the new path.
  std::string set_aside(const std::string& checkpoint) const;
  // Appends "=== step N ===" and the sample to samples.txt.
  void append_sample(int64_t step, const std::string& text) const;
  void write_summary(const nlohmann::json& summary) const;
  // summary.json as written by an earlier run in this directory; null when absent or unreadable.
  nlohmann::json read_summary() const;

 private:
  std::string file(const char* name) const;

  std::string path_;
  RunContext ctx_;
  int lock_fd_ = -1;
};

}  // namespace eco
