// The plain fp32 steps of many tensors in one launch (the optimizer's unquantized parameters:
// ~150 tensors in GPT-2, most of them bias and norm vectors of a few hundred elements, each of
// which would otherwise be a launch of its own). Element math as fp32_plain_update (any rule of
// src/base/math/optimizer_rules.h), so the bits are its.
//
// The work is cut into chunks of at most kMultiTensorChunk elements of one tensor; block b
// updates chunk b. The tensor and chunk tables live on the device (MultiTensorPlan: built and
// uploaded once for a list of tensors, reused every step while the list is the same).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "base/math/optimizer_rules.h"
#include "kernels/cuda/device_buffer.h"

namespace eco::cuda {

constexpr int64_t kMultiTensorChunk = 16384;  // elements per block

// One tensor of the update: param, grad, m (and v for AdamW) of n elements, any alignment
// (16-byte aligned buffers take vector loads), and its own weight decay.
struct MultiTensorSlice {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;  // rules with a second moment (AdamW) only
  int64_t n = 0;
  float weight_decay = 0.0f;
};

// Block b's work: elements [begin, begin + count) of slice `slice`.
struct MultiTensorChunk {
  int32_t slice;
  int32_t count;
  int64_t begin;
};

// The device tables for a list of slices. build() checks the list (non-null buffers for n > 0,
// n >= 0; v when with_v: the rule has a second moment) and throws eco::Error naming the slice
// otherwise.
class MultiTensorPlan {
 public:
  // Rebuilds (and uploads on stream s) only when the slices differ from the last call's.
  void build(const std::vector<MultiTensorSlice>& slices, bool with_v, cudaStream_t s);
  int64_t chunks() const { return chunks_; }
  const void* slice_table() const { return slices_dev_.get(); }
  const void* chunk_table() const { return chunks_dev_.get(); }
  // Times the tables were (re)built: one for a fixed list (tests).
  int64_t builds() const { return builds_; }

 private:
  std::vector<MultiTensorSlice> last_;
  bool last_with_v_ = false;
  DeviceBuffer slices_dev_, chunks_dev_;
  int64_t chunks_ = 0, builds_ = 0;
};

// The plain step of step's rule on every slice of `plan` (step.weight_decay is replaced by each
// slice's).
cudaError_t fp32_plain_update_many(const MultiTensorPlan& plan, const RuleStep& step,
                                   cudaStream_t s = nullptr);

}  // namespace eco::cuda
