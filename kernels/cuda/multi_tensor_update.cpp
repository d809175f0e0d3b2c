// MultiTensorPlan: the device tables of the multi-tensor update (multi_tensor_update.cu), built
// on the host once per list of tensors.
#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/multi_tensor_update.cuh"

namespace eco::cuda {

void MultiTensorPlan::build(const std::vector<MultiTensorSlice>& slices, bool with_v,
                            cudaStream_t s) {
  const auto same = [](const MultiTensorSlice& a, const MultiTensorSlice& b) {
    return a.param == b.param && a.grad == b.grad && a.m == b.m && a.v == b.v && a.n == b.n &&
           a.weight_decay == b.weight_decay;
  };
  if (builds_ > 0 && with_v == last_with_v_ && slices.size() == last_.size() &&
      std::equal(slices.begin(), slices.end(), last_.begin(), same))
    return;
  if (slices.size() > size_t(INT32_MAX))
    runtime_error("multi-tensor update: {} tensors (at most 2^31 - 1)", slices.size());
  std::vector<MultiTensorChunk> chunks;
  for (size_t i = 0; i < slices.size(); ++i) {
    const MultiTensorSlice& t = slices[i];
    if (t.n < 0) runtime_error("multi-tensor update: tensor {} has {} elements", i, t.n);
    if (t.n > 0 && (!t.param || !t.grad || !t.m || (with_v && !t.v)))
      runtime_error("multi-tensor update: tensor {} ({} elements) lacks param, grad, m{}", i,
                    t.n, with_v ? " or v" : "");
    for (int64_t b = 0; b < t.n; b += kMultiTensorChunk)
      chunks.push_back({int32_t(i), int32_t(std::min(kMultiTensorChunk, t.n - b)), b});
  }
  if (chunks.size() > size_t(INT32_MAX))
    runtime_error("multi-tensor update: {} chunks (at most 2^31 - 1)", chunks.size());
  slices_dev_ = DeviceBuffer(std::max<size_t>(1, slices.size()) * sizeof(MultiTensorSlice));
  chunks_dev_ = DeviceBuffer(std::max<size_t>(1, chunks.size()) * sizeof(MultiTensorChunk));
  if (!slices.empty())
    ECO_CHECK_CUDA(cudaMemcpyAsync(slices_dev_.get(), slices.data(),
                                   slices.size() * sizeof(MultiTensorSlice),
                                   cudaMemcpyHostToDevice, s));
  if (!chunks.empty())
    ECO_CHECK_CUDA(cudaMemcpyAsync(chunks_dev_.get(), chunks.data(),
                                   chunks.size() * sizeof(MultiTensorChunk),
                                   cudaMemcpyHostToDevice, s));
  ECO_CHECK_CUDA(cudaStreamSynchronize(s));  // the host vectors die here
  last_ = slices;
  last_with_v_ = with_v;
  chunks_ = int64_t(chunks.size());
  ++builds_;
}

}  // namespace eco::cuda
