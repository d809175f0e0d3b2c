// Philox4x32-10 (Salmon et al., SC'11; Random123): the counter-based generator behind stochastic
// rounding. A draw is a pure function of (seed, step, tensor id, element index), so the CPU and
// CUDA backends and every data-parallel replica round each element identically.
#pragma once
#include <cstdint>

#include "kernels/common/hd.h"

namespace eco {

struct Philox4x32 {
  uint32_t v[4];
};

// One Philox4x32 round: two 32x32->64 multiplies, a Feistel-like swap, the key xored in.
ECO_HD Philox4x32 philox4x32_round(Philox4x32 c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(0xD2511F53u) * c.v[0];
  const uint64_t p1 = uint64_t(0xCD9E8D57u) * c.v[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  return Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

// Philox4x32-10 of `counter` under key (k0, k1): 10 rounds, the key bumped by the Weyl constants
// between rounds. Equals Random123's philox4x32(ctr, key) word for word.
ECO_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    counter = philox4x32_round(counter, k0, k1);
  }
  return counter;
}

// The 32 random bits of one element. Mapping (fixed: checkpoints and fixtures depend on it):
//   key     = (seed lo32, seed hi32)
//   counter = (element lo32, element hi32, step lo32, tensor_id ^ step hi32)
// and the result is output word 0. Distinct (step, tensor_id, element) give distinct counters as
// long as step < 2^32 (beyond that, step's high word is folded into the tensor id).
ECO_HD uint32_t philox_bits(uint64_t seed, uint64_t step, uint32_t tensor_id, uint64_t element) {
  const Philox4x32 ctr{{uint32_t(element), uint32_t(element >> 32), uint32_t(step),
                        tensor_id ^ uint32_t(step >> 32)}};
  return philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32)).v[0];
}

// Uniform in [0, 1) from the top 24 bits (every value exactly representable in fp32).
ECO_HD float uniform_from_bits(uint32_t bits) { return float(bits >> 8) * 0x1.0p-24f; }

}  // namespace eco
