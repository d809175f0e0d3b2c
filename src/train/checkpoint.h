// Checkpoints: the full training state (parameters, optimizer moments, step) in one file,
// written atomically (temp file, fsync, rename) and protected by a CRC32 checksum.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/loss_spike.h"

namespace eco {

struct CheckpointState {
  int64_t step = 0;          // optimizer steps completed
  int64_t tokens = 0;        // training tokens consumed
  std::string fingerprint;   // model_fingerprint(config): must match to resume
  std::string config_yaml;   // the resolved config, for inspection
  // Named raw sections (params, m, v, ...), each a byte blob in the backend's dtype.
  std::vector<std::pair<std::string, std::vector<char>>> sections;
  // The loss-spike detector after `step` (empty in a version 1 file, which predates it).
  LossSpikeDetector::State loss_spikes;
  const std::vector<char>& section(const std::string& name, const std::string& path) const;
};

// Write `state` to `path` atomically. Throws on any I/O failure, leaving no partial file.
void save_checkpoint(const std::string& path, const CheckpointState& state);
// Read and verify (magic, version, checksum, lengths, the loss-spike record). Errors name the file
// and the problem. Versions 1 and 2 load.
CheckpointState load_checkpoint(const std::string& path);
// Checkpoint file name for a step, and the newest checkpoint in a run directory ("" if none).
std::string checkpoint_name(int64_t step);
// The checkpoints in `dir` as (step, path), oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
std::string latest_checkpoint(const std::string& dir);
// Delete all but the newest `keep` checkpoints in `dir`; returns the paths deleted.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep);

}  // namespace eco
