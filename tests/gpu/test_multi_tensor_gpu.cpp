// GPU tests: the plain AdamW / SGDM steps of many tensors in one launch
// (kernels/cuda/multi_tensor_update.cuh) against the CPU backend's plain_update loops. Tolerance 0:
// the same src/base/math element functions with the same coefficients (--fmad=false,
// -ffp-contract=off), so every parameter and moment must carry the CPU's bits, step after step.
// The tensors mix sizes (empty, 1, 3, a chunk boundary +- 1, several chunks, a ragged tail),
// alignments (offsets of 0 and 1 float: vector and element-wise paths) and weight decays, and sit
// in one device buffer separated by 0xFF (NaN) gaps that must survive: an element written twice,
// out of range or not at all shows as a mismatch or a broken gap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "gpu_test.h"
#include "kernels/cuda/multi_tensor_update.cuh"
#include "base/backend.h"

namespace eco {
namespace {

using gputest::randn;
using gputest::to_device;
using gputest::to_host;

constexpr int64_t kChunk = cuda::kMultiTensorChunk;

struct Layout {
  std::vector<int64_t> offset, n;
  std::vector<float> wd;
  int64_t total = 0;
};

// Tensors back to back with a gap of 5 floats (plus the alignment offset) between them.
Layout make_layout() {
  const int64_t sizes[] = {0, 1, 3, 768, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 7, 50000};
  Layout l;
  int k = 0;
  for (int64_t misalign : {0, 1})
    for (int64_t n : sizes) {
      l.total += 5;
      l.total = (l.total + 3) / 4 * 4 + misalign;  // 16-byte aligned start, or one float past it
      l.offset.push_back(l.total);
      l.n.push_back(n);
      l.wd.push_back(k++ % 3 == 0 ? 0.0f : 0.01f * float(k));
      l.total += n;
    }
  l.total += 5;
  return l;
}

bool is_poison(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b == 0xFFFFFFFFu;
}

// Buffers of l.total floats: values inside the tensors, 0xFF elsewhere.
std::vector<float> fill(const Layout& l, uint64_t seed, float scale) {
  std::vector<float> out(size_t(l.total));
  std::memset(out.data(), 0xFF, out.size() * sizeof(float));
  const std::vector<float> r = randn(size_t(l.total), seed, scale);
  for (size_t t = 0; t < l.n.size(); ++t)
    for (int64_t i = 0; i < l.n[t]; ++i)
      out[size_t(l.offset[t] + i)] = r[size_t(l.offset[t] + i)];
  return out;
}

::testing::AssertionResult same_bits(const std::vector<float>& gpu, const std::vector<float>& cpu,
                                     const Layout& l) {
  std::vector<bool> inside(gpu.size(), false);
  for (size_t t = 0; t < l.n.size(); ++t)
    for (int64_t i = 0; i < l.n[t]; ++i) inside[size_t(l.offset[t] + i)] = true;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!inside[i] && !is_poison(gpu[i]))
      return ::testing::AssertionFailure() << "gap element " << i << " was written";
    if (inside[i] && std::memcmp(&gpu[i], &cpu[i], 4) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": gpu " << gpu[i] << " cpu "
                                           << cpu[i];
  }
  return ::testing::AssertionSuccess();
}

void check(bool adamw) {
  const Layout l = make_layout();
  auto cpu = make_cpu_backend(DType::F32);
  std::vector<float> w = fill(l, 1, 1.0f), g = fill(l, 2, 0.01f), m = fill(l, 3, 1e-3f),
                     v = fill(l, 4, 1e-6f);
  for (size_t i = 0; i < v.size(); ++i)
    if (!is_poison(v[i])) v[i] = std::abs(v[i]);
  auto dw = to_device(w), dg = to_device(g), dm = to_device(m), dv = to_device(v);
  cuda::MultiTensorPlan plan;
  std::vector<cuda::MultiTensorSlice> slices;
  std::vector<PlainUpdate> host;
  for (size_t t = 0; t < l.n.size(); ++t) {
    const int64_t o = l.offset[t], n = l.n[t];
    slices.push_back({dw.get<float>() + o, dg.get<float>() + o, dm.get<float>() + o,
                      adamw ? dv.get<float>() + o : nullptr, n, l.wd[t]});
    host.push_back({Tensor{w.data() + o, {n}, DType::F32}, Tensor{g.data() + o, {n}, DType::F32},
                    Tensor{m.data() + o, {n}, DType::F32},
                    adamw ? Tensor{v.data() + o, {n}, DType::F32} : Tensor{}, n, l.wd[t], n});
  }
  for (int step = 1; step <= 3; ++step) {
    const RuleStep st =
        adamw ? adamw_step(1e-3f * float(step), 0.9f, 0.95f, 1e-8f, 0.5f /*replaced*/, 0.7f, step)
              : sgdm_step(0.05f * float(step), 0.9f, 0.5f /*replaced*/, 0.8f);
    cpu->plain_update(host, st);
    plan.build(slices, adamw, nullptr);
    ECO_CHECK_CUDA(cuda::fp32_plain_update_many(plan, st));
  }
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(plan.builds(), 1) << "the tables are uploaded once for a fixed list";
  EXPECT_TRUE(same_bits(to_host<float>(dw, w.size()), w, l)) << "param";
  EXPECT_TRUE(same_bits(to_host<float>(dm, m.size()), m, l)) << "m";
  if (adamw) {
    EXPECT_TRUE(same_bits(to_host<float>(dv, v.size()), v, l)) << "v";
  }
}

TEST(GpuMultiTensorUpdate, AdamWIsBitIdenticalToCpuPerTensorSteps) {
  ECO_REQUIRE_GPU();
  check(true);
}

TEST(GpuMultiTensorUpdate, SgdmIsBitIdenticalToCpuPerTensorSteps) {
  ECO_REQUIRE_GPU();
  check(false);
}

// A changed list rebuilds the tables; a tensor without its buffers is refused, naming it.
TEST(GpuMultiTensorUpdate, RebuildsForANewListAndRefusesMissingBuffers) {
  ECO_REQUIRE_GPU();
  auto buf = to_device(std::vector<float>(64, 0.0f));
  float* p = buf.get<float>();
  cuda::MultiTensorPlan plan;
  plan.build({{p, p + 16, p + 32, p + 48, 16, 0.0f}}, true, nullptr);
  plan.build({{p, p + 16, p + 32, p + 48, 16, 0.0f}}, true, nullptr);
  EXPECT_EQ(plan.builds(), 1);
  plan.build({{p, p + 16, p + 32, p + 48, 8, 0.0f}}, true, nullptr);
  EXPECT_EQ(plan.builds(), 2);
  EXPECT_EQ(plan.chunks(), 1);
  try {
    plan.build({{p, p + 16, p + 32, nullptr, 16, 0.0f}}, true, nullptr);
    ADD_FAILURE() << "AdamW without v accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace eco
