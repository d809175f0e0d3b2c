// Text samples: tokens drawn one at a time from the model's softmax at train.sample_temperature,
// starting from one prompt token, and decoded to text (the synthetic corpus' syllables, the
// data's decode table, or the token ids when there is no table).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"
#include "data/decode_table.h"
#include "base/backend.h"
#include "model/transformer.h"

namespace eco {

class TextSampler {
 public:
  // Loads data.decode_table, or decode_table.bin beside the first training shard when it exists;
  // a table larger than model.vocab_size is a usage error.
  explicit TextSampler(const Config& cfg);

  // `prompt` followed by n_tokens sampled tokens (context: the last seq_len), as text. The
  // draws come from Rng(seed) only, so a sample does not disturb training's random streams. A
  // stop signal (train/signals.h) ends it early, with the tokens drawn so far.
  // stop_early: as mean_val_loss's (train/evaluator.h).
  std::string sample(Transformer& model, Backend& backend, int32_t prompt, int n_tokens,
                     uint64_t seed, bool stop_early = true) const;
  std::string decode(const int32_t* tokens, size_t n) const;

 private:
  int seq_len_, vocab_size_;
  double temperature_;
  bool synthetic_;
  std::optional<DecodeTable> table_;
};

}  // namespace eco
