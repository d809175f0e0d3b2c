// Small, platform-independent random numbers for initialisation and sampling
// (std:: distributions are implementation-defined, so we do not use them).
#pragma once
#include <cmath>
#include <cstdint>

namespace eco {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() { return splitmix64(state_); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace eco
