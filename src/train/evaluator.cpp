// Validation loss over a run's eval batches.
#include "train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "train/signals.h"

namespace eco {

double mean_val_loss(Transformer& model, const DataLoader& val, int batch_size, int seq_len,
                     int64_t eval_batches, bool stop_early) {
  const int B = batch_size, T = seq_len;
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  const int64_t available = std::max<int64_t>(1, val.windows_per_epoch() / B);
  const int64_t n = std::min<int64_t>(eval_batches, available);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (stop_early && stop_requested()) return std::nan("");  // a stop signal: the run saves and exits
    val.batch(i, in.data(), tgt.data());
    sum += model.forward_loss(in.data(), tgt.data(), B, T);
  }
  return sum / double(n);
}

}  // namespace eco
