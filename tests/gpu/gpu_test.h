// Helpers for the GPU tests: skip visibly without a GPU, move data between host and device,
// poison outputs, compare against the CPU twin with a relative-norm tolerance (NaN never passes)
// or bit for bit.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/rel_err.h"
#include "core/rng.h"
#include "base/math/bf16.h"
#include "kernels/cuda/device_buffer.h"
#include "base/backend.h"

namespace eco::gputest {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Skips the test with a visible message when no GPU is present.
#define ECO_REQUIRE_GPU()                                                   \
  do {                                                                      \
    if (!::eco::gputest::have_gpu()) GTEST_SKIP() << "no CUDA GPU: skipped"; \
  } while (0)

template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& h) {
  cuda::DeviceBuffer d(h.size() * sizeof(T));
  if (!h.empty()) ECO_CHECK_CUDA(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  if (n) ECO_CHECK_CUDA(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Fill a device buffer with a NaN pattern (0xFF bytes), so unwritten outputs cannot pass.
inline void poison(const cuda::DeviceBuffer& d) { ECO_CHECK_CUDA(cudaMemset(d.get(), 0xFF, d.bytes())); }

// Fresh random normals (scale `std`) from a seed.
inline std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(std * r.normal());
  return v;
}

// Random normals rounded to bf16: the bits for the GPU, their exact float values for the CPU.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
inline Bf16Data random_bf16(size_t n, uint64_t seed, float std) {
  Bf16Data d{std::vector<uint16_t>(n), randn(n, seed, std)};
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = float_to_bf16(d.values[i]);
    d.values[i] = bf16_to_float(d.bits[i]);
  }
  return d;
}
inline std::vector<float> bf16_values(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

// Bit equality of two float vectors (NaNs included), naming the first difference.
inline ::testing::AssertionResult same_bits(const std::vector<float>& a,
                                            const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

using eco::rel_err;  // src/core/rel_err.h: ||a - b|| / ||b||, +inf for a NaN / inf in a

// Through the Backend interface (tests of backend operations): a tensor's raw elements to the
// host, and a host vector into a new tensor of the backend (ledger category Workspace).
template <class T>
std::vector<T> download(Backend& be, const Tensor& t) {
  std::vector<T> h(size_t(t.numel()));
  be.copy_to_host(h.data(), t);
  return h;
}
template <class T>
Tensor upload(Backend& be, const std::vector<T>& h, DType dtype, std::vector<int64_t> shape) {
  Tensor t = be.alloc("test", std::move(shape), dtype, MemCategory::Workspace);
  be.copy_from_host(t, h.data());
  return t;
}

}  // namespace eco::gputest
