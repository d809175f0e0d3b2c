// DataLoader: deterministic (B, T+1) windows from token shards or the synthetic corpus.
// batch(index) is a pure function of (index, options), so resuming needs no saved loader state.
//
// Slots: rank r of world w fills row b of global batch i from window slot (i*w + r)*B + b, so the
// ranks of one step take disjoint windows and together cover (i*w*B .. (i+1)*w*B).
// Shards: window k is tokens [k*T, k*T + T + 1) of one shard (never crossing a shard boundary);
// a shard of n tokens holds (n - 1) / T windows. Slot s is window s % W of epoch s / W, and with
// shuffle on, epoch e visits windows in a Fisher-Yates order drawn from splitmix64(seed, e).
// Synthetic: slot s is window s of the split; no epochs, seed and shuffle are not used (every
// window is already an independent draw).
//
// Memory: shards are streamed. from_shards checks each shard's header and length and keeps it
// open (ShardReader); batch() reads each window's T + 1 tokens with pread and checks them against
// vocab_size, so no token stays resident. With shuffle on, what grows with the corpus is the
// epoch permutation, an int64 per window (8 W bytes), of which the two most recent epochs are
// kept: at 80B tokens and T = 1024, W = 78.1M windows, 625 MB per epoch, 1.25 GB for two.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/synthetic.h"

namespace eco {

struct LoaderOptions {
  int batch_size;  // B: rows per rank per batch
  int seq_len;     // T
  int vocab_size;  // every token must be < vocab_size
  uint64_t seed;   // shuffle seed
  bool shuffle;    // permute windows per epoch (train); validation uses false
  int rank = 0;
  int world_size = 1;
};

class DataLoader {
 public:
  // pattern: a path or a glob (sorted). Opens every shard and checks its header, its length and
  // that it holds one window; tokens are checked (< vocab) as batch() reads them.
  static DataLoader from_shards(const std::string& pattern, const LoaderOptions& options);
  // split: 0 train, 1 val.
  static DataLoader synthetic(int split, const LoaderOptions& options);

  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  ~DataLoader();

  // inputs, targets: (B, T) int32 each, for global batch `index` (0, 1, 2, ...);
  // targets[b, t] == inputs[b, t+1] within the window. Thread-safe. A token >= vocab_size in one
  // of the windows, or a shard that came back short (truncated after from_shards), throws a data
  // error naming the file.
  void batch(int64_t index, int32_t* inputs, int32_t* targets) const;

  int64_t windows_per_epoch() const;  // synthetic: effectively unlimited (INT64_MAX / 2)
  int64_t num_tokens() const;         // synthetic: INT64_MAX / 2
  // The loss floor in nats: set for the synthetic corpus (its entropy rate), empty for shards.
  std::optional<double> entropy_floor_nats() const;
  // The synthetic corpus (for render()), or null for shards.
  const SyntheticCorpus* synthetic_corpus() const;
  const std::vector<ShardInfo>& shards() const;
  const LoaderOptions& options() const;
  std::string describe() const;  // one line for the log

 private:
  struct State;
  explicit DataLoader(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// The window order of one epoch: a Fisher-Yates permutation of 0..num_windows-1 drawn from a
// splitmix64 stream seeded by (seed, epoch). Exposed for tests and tools.
std::vector<int64_t> epoch_permutation(int64_t num_windows, uint64_t seed, int64_t epoch);

}  // namespace eco
