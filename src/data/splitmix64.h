// The data layer's random draws, on core/rng.h's splitmix64: an unbiased Fisher-Yates shuffle,
// and a counter-based hash so a synthetic token is a pure function of (corpus seed, split, window,
// position). All of it is fully specified integer arithmetic, so every platform draws the same
// numbers (unlike std::shuffle / std::uniform_int_distribution, which are implementation-defined).
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/rng.h"

namespace eco::data {

// Hash of a tuple of counters: each word is added to the state and mixed by one splitmix64 step
// (order matters).
inline uint64_t hash_counters(std::initializer_list<uint64_t> words) {
  uint64_t h = 0;
  for (uint64_t w : words) {
    uint64_t state = h + w;
    h = splitmix64(state);
  }
  return h;
}

// Uniform integer in [0, n), n > 0, without modulo bias (Lemire's multiply-and-reject).
inline uint64_t uniform_below(Rng& rng, uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(rng.next_u64()) * n;
  if (static_cast<uint64_t>(m) < n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (static_cast<uint64_t>(m) < threshold)
      m = static_cast<unsigned __int128>(rng.next_u64()) * n;
  }
  return static_cast<uint64_t>(m >> 64);
}

// Fisher-Yates shuffle of data[0..n) drawing from rng (the same order on every platform).
template <class T>
void fisher_yates(T* data, int64_t n, Rng& rng) {
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    T tmp = data[i];
    data[i] = data[j];
    data[j] = tmp;
  }
}

// Multiply-shift of 64 random bits onto [0, n): bias below n / 2^64, negligible for a vocabulary.
inline uint64_t scale_below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace eco::data
