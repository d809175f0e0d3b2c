// Validation loss: the mean forward loss over the first eval_batches batches of the validation
// split (never more batches than the split holds, so no window counts twice).
#pragma once
#include <cstdint>

#include "data/loader.h"
#include "model/transformer.h"

namespace eco {

// batch_size, seq_len: the model's (B, T); val's windows are (T + 1) tokens. NaN when a stop
// signal (train/signals.h) cuts the evaluation short.
// A stop signal cuts it short (NaN) unless `stop_early` is false: under expert parallelism the
// forward exchanges rows with the other ranks, and a rank that stopped alone would leave them
// waiting; the training loop's agreed stop follows instead.
double mean_val_loss(Transformer& model, const DataLoader& val, int batch_size, int seq_len,
                     int64_t eval_batches, bool stop_early = true);

}  // namespace eco
