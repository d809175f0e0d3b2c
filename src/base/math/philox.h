// Philox4x32-10 (Salmon et al., SC'11; Random123): the counter-based generator behind stochastic
// rounding. A draw is a pure function of (seed, step, tensor id, element index), so the CPU and
// CUDA backends and every data-parallel replica round each element identically.
#pragma once
#include <cstdint>

#include "base/math/hd.h"

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

// The ten round keys of key (k0, k1): round r xors in (k0 + r * 0x9E3779B9, k1 + r * 0xBB67AE85)
// (the Weyl sequence). The key is uniform over a launch, so the kernels take the schedule
// precomputed (FormatQuantizer builds it on the host and passes it in the kernel's parameters)
// instead of 18 additions per Philox call.
struct PhiloxKey {
  uint32_t k0[10], k1[10];
};
ECO_HD PhiloxKey philox_key(uint32_t k0, uint32_t k1) {
  PhiloxKey key{};
  for (int r = 0; r < 10; ++r) {
    key.k0[r] = k0 + uint32_t(r) * 0x9E3779B9u;
    key.k1[r] = k1 + uint32_t(r) * 0xBB67AE85u;
  }
  return key;
}

// Philox4x32-10 of `counter`: 10 rounds under the key's schedule. Equals Random123's
// philox4x32(ctr, key) word for word.
ECO_HD Philox4x32 philox4x32_10(Philox4x32 counter, const PhiloxKey& key) {
  for (int r = 0; r < 10; ++r) counter = philox4x32_round(counter, key.k0[r], key.k1[r]);
  return counter;
}
ECO_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t k0, uint32_t k1) {
  return philox4x32_10(counter, philox_key(k0, k1));
}

// Word k (0..3) of p without indexing the array by a run-time value (which would put p in local
// memory on the GPU): k is a compile-time constant in the unrolled hot loops.
ECO_HD uint32_t philox_word(const Philox4x32& p, uint32_t k) {
  const uint32_t lo = (k & 1u) ? p.v[1] : p.v[0], hi = (k & 1u) ? p.v[3] : p.v[2];
  return (k & 2u) ? hi : lo;
}

// The random bits of SR. Mapping (fixed: checkpoints and fixtures depend on it):
//   element e takes output word (e & 3) of Philox4x32-10 with
//   key     = (seed lo32, seed hi32)
//   counter = (g lo32, g hi32, step lo32, tensor_id ^ step hi32),  g = e >> 2,
// so the 4 consecutive elements of a group share one Philox call (e: the element's row-major
// index in its tensor, i = row * cols + col). Distinct (step, tensor_id, element) give distinct
// (counter, word) pairs as long as step < 2^32 (beyond that, step's high word is folded into
// the tensor id).
// Until 2026-11 an element took word 0 of the counter (e lo32, e hi32, ...): one full 10-round
// call per element for 32 of its 128 bits, the largest cost of the fused quantized update on
// the GPU. A checkpoint written before then resumes correctly, but its SR draws from then on
// differ from those the old code would have made (no bit-exact continuation across the change).

// The key schedule of (seed lo32, seed hi32).
ECO_HD PhiloxKey philox_seed_key(uint64_t seed) {
  return philox_key(uint32_t(seed), uint32_t(seed >> 32));
}

// The four words of group g: philox_bits(.., 4g + k) == philox_group(.., g).v[k]. The hot loops
// call it once per 4 consecutive elements, with the key schedule precomputed.
ECO_HD Philox4x32 philox_group(const PhiloxKey& key, uint64_t step, uint32_t tensor_id,
                               uint64_t group) {
  const Philox4x32 ctr{{uint32_t(group), uint32_t(group >> 32), uint32_t(step),
                        tensor_id ^ uint32_t(step >> 32)}};
  return philox4x32_10(ctr, key);
}
ECO_HD Philox4x32 philox_group(uint64_t seed, uint64_t step, uint32_t tensor_id, uint64_t group) {
  return philox_group(philox_seed_key(seed), step, tensor_id, group);
}

// The 32 random bits of one element (see the mapping above).
ECO_HD uint32_t philox_bits(uint64_t seed, uint64_t step, uint32_t tensor_id, uint64_t element) {
  return philox_word(philox_group(seed, step, tensor_id, element >> 2), uint32_t(element & 3u));
}

// SR draws for a loop that visits elements in increasing order (any start, any stride): one
// Philox call per group of 4 consecutive elements it touches, however rows or tiles cut the
// groups (a group met again after a gap is drawn again: its words are a pure function of it).
// Source: any type with `Philox4x32 draws(uint64_t group) const` (FormatQuantizer, the tests'
// quantizers).
template <class Source>
struct GroupDrawCursor {
  const Source& source;
  uint64_t group = ~uint64_t(0);  // no element's group (e >> 2 < 2^62)
  Philox4x32 words{};
  ECO_HD uint32_t operator()(uint64_t element) {
    if ((element >> 2) != group) {
      group = element >> 2;
      words = source.draws(group);
    }
    return philox_word(words, uint32_t(element & 3u));
  }
};

// Uniform in [0, 1) from the top 24 bits (every value exactly representable in fp32).
ECO_HD float uniform_from_bits(uint32_t bits) { return float(bits >> 8) * 0x1.0p-24f; }

}  // namespace eco
