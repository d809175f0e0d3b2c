// Shared helpers of the emulator tests: random data, bf16 bits, guarded host "device" buffers
// (0xFF guard bands that must survive), bitwise diffs, a failure tally reported to GoogleTest.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if !defined(ECO_CUDA_EMU) || defined(__CUDA_RUNTIME_H__)
#error "tests/emu must see the emulator's cuda_runtime.h (tests/emu/shim), not the toolkit's"
#endif

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/math/bf16.h"

namespace emuh {

inline std::vector<float> randn(size_t n, uint64_t seed, float sd, float mean = 0.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = eco::float_to_bf16(x[i]);
  return b;
}
inline float bf(uint16_t b) { return eco::bf16_to_float(b); }

// n elements of T at a chosen byte misalignment from a 64-byte boundary, with kGuard bytes of
// 0xFF before and after (and the alignment slack poisoned too).
template <class T>
struct Guarded {
  static constexpr size_t kGuard = 256;
  std::vector<unsigned char> raw;
  size_t n, mis;
  explicit Guarded(size_t n_, size_t misalign_bytes = 0) : n(n_), mis(misalign_bytes) {
    raw.assign(kGuard + 64 + mis + n * sizeof(T) + kGuard, 0xFF);
  }
  Guarded(const std::vector<T>& h, size_t misalign_bytes = 0) : Guarded(h.size(), misalign_bytes) {
    if (!h.empty()) std::memcpy(data(), h.data(), h.size() * sizeof(T));
  }
  unsigned char* bytes() {
    uintptr_t p = reinterpret_cast<uintptr_t>(raw.data()) + kGuard;
    p = (p + 63) / 64 * 64 + mis;
    return reinterpret_cast<unsigned char*>(p);
  }
  T* data() { return reinterpret_cast<T*>(bytes()); }
  std::vector<T> host() {
    std::vector<T> h(n);
    if (n) std::memcpy(h.data(), data(), n * sizeof(T));
    return h;
  }
  void set(const std::vector<T>& h) { std::memcpy(data(), h.data(), n * sizeof(T)); }
  bool guards_intact() {
    const unsigned char* b = bytes();
    for (unsigned char* q = raw.data(); q < b; ++q)
      if (*q != 0xFF) return false;
    for (const unsigned char* q = b + n * sizeof(T); q < raw.data() + raw.size(); ++q)
      if (*q != 0xFF) return false;
    return true;
  }
};

// A bf16 buffer (held as its uint16_t bits) as the kernels take it.
inline __nv_bfloat16* bf16p(Guarded<uint16_t>& g) {
  return reinterpret_cast<__nv_bfloat16*>(g.data());
}

// Number of elements whose bits differ; *first the index of the first.
template <class T>
long differ(const T* a, const T* b, size_t n, long* first = nullptr) {
  long c = 0;
  if (first) *first = -1;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T))) {
      if (!c && first) *first = long(i);
      ++c;
    }
  return c;
}
template <class T>
long differ(const std::vector<T>& a, const std::vector<T>& b, long* first = nullptr) {
  if (a.size() != b.size()) return -1;
  return differ(a.data(), b.data(), a.size(), first);
}

struct Tally {
  int cases = 0, failures = 0;
  void fail(const std::string& what) {
    ++failures;
    if (failures <= 40) ADD_FAILURE() << what;
  }
};

}  // namespace emuh
