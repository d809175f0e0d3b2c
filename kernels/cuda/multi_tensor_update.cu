// The plain fp32 step of many tensors in one launch: block b takes chunk b (one tensor's
// elements [begin, begin + count), count <= kMultiTensorChunk) and applies the same element
// rule (src/base/math/optimizer_rules.h) as fp32_plain_update and the CPU backend, so each
// element gets the same bits.
// The tables are built on the host (multi_tensor_update.cpp).
// Launch assumptions (checked in MultiTensorPlan::build): n >= 0, non-null param / grad / m
// (and v for a rule with a second moment) when n > 0, fewer than 2^31 chunks. Chunk starts are
// multiples of kMultiTensorChunk (a multiple of 4), so a tensor whose four buffers are 16-byte
// aligned keeps float4 access in every chunk; any other alignment goes element by element.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/math/optimizer_rules.h"
#include "kernels/cuda/multi_tensor_update.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kMultiTensorChunk % 4 == 0, "chunk starts must keep float4 alignment");

__device__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class Rule>
__global__ void __launch_bounds__(kThreads)
    update_many_kernel(const MultiTensorSlice* __restrict__ slices,
                       const MultiTensorChunk* __restrict__ chunks, RuleStep step) {
  constexpr bool kHasV = Rule::kHasV;
  const MultiTensorChunk ch = chunks[blockIdx.x];
  const MultiTensorSlice sl = slices[ch.slice];
  const Rule rule(with_weight_decay(step, sl.weight_decay));
  float* __restrict__ w = sl.param + ch.begin;
  const float* __restrict__ g = sl.grad + ch.begin;
  float* __restrict__ m = sl.m + ch.begin;
  float* __restrict__ v = kHasV ? sl.v + ch.begin : nullptr;
  float v_unused = 0.0f;
  const int count = ch.count;
  int tail = 0;
  if (aligned16(w) && aligned16(g) && aligned16(m) && (!kHasV || aligned16(v))) {
    for (int q = threadIdx.x; q < count / 4; q += kThreads) {
      float4 ww = reinterpret_cast<float4*>(w)[q], mm = reinterpret_cast<float4*>(m)[q];
      const float4 gg = reinterpret_cast<const float4*>(g)[q];
      float4 vv = kHasV ? reinterpret_cast<float4*>(v)[q] : float4{};
      ww.x = rule.step(ww.x, gg.x, mm.x, vv.x);
      ww.y = rule.step(ww.y, gg.y, mm.y, vv.y);
      ww.z = rule.step(ww.z, gg.z, mm.z, vv.z);
      ww.w = rule.step(ww.w, gg.w, mm.w, vv.w);
      reinterpret_cast<float4*>(w)[q] = ww;
      reinterpret_cast<float4*>(m)[q] = mm;
      if constexpr (kHasV) reinterpret_cast<float4*>(v)[q] = vv;
    }
    tail = count - count % 4;
  }
  for (int i = tail + int(threadIdx.x); i < count; i += kThreads)
    w[i] = rule.step(w[i], g[i], m[i], kHasV ? v[i] : v_unused);
}

}  // namespace

cudaError_t fp32_plain_update_many(const MultiTensorPlan& plan, const RuleStep& step,
                                   cudaStream_t s) {
  if (plan.chunks() == 0) return cudaSuccess;
  return with_rule(step, [&](const auto& rule) {
    using Rule = std::decay_t<decltype(rule)>;
    update_many_kernel<Rule><<<unsigned(plan.chunks()), kThreads, 0, s>>>(
        static_cast<const MultiTensorSlice*>(plan.slice_table()),
        static_cast<const MultiTensorChunk*>(plan.chunk_table()), step);
    return cudaGetLastError();
  });
}

}  // namespace eco::cuda
