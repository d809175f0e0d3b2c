// FormatQuantizer: the Quantizer that eco_update.h's group update expects, built from a QFormat,
// a rounding mode and the SR random stream's key (seed, step, tensor id). Both backends use it,
// so their codes and SR decisions are bit-identical.
#pragma once
#include <cstdint>

#include "base/math/hd.h"
#include "base/math/philox.h"
#include "base/math/qformat.h"

namespace eco {

struct FormatQuantizer {
  QFormat format;
  Rounding rounding;
  uint64_t seed, step;
  uint32_t tensor_id;
  // seed's Philox key schedule, derived at construction (so a kernel that takes the quantizer as
  // a parameter reads the round keys instead of computing them per call): build a new
  // FormatQuantizer rather than assigning `seed`.
  PhiloxKey key = philox_seed_key(seed);

  ECO_HD float scale_for(float absmax) const { return group_scale(format, absmax); }
  // SR bits of element `elem` (its row-major index; philox_bits), and of the group of elements
  // 4 group .. 4 group + 3 in one Philox call. RTN draws nothing (zeros).
  ECO_HD uint32_t draw(int64_t elem) const {
    return philox_word(draws(uint64_t(elem) >> 2), uint32_t(elem & 3));
  }
  ECO_HD Philox4x32 draws(uint64_t group) const {
    return rounding == Rounding::SR ? philox_group(key, step, tensor_id, group) : Philox4x32{};
  }
  ECO_HD uint8_t encode(float x, float scale, uint32_t bits) const {
    return quantize_value(format, rounding, x, scale, bits);
  }
  ECO_HD float decode(uint8_t code, float scale) const {
    return dequantize_value(format, code, scale);
  }
  ECO_HD uint8_t load(const uint8_t* codes, int64_t i) const { return load_code(format, codes, i); }
  ECO_HD void store(uint8_t* codes, int64_t i, uint8_t c) const { store_code(format, codes, i, c); }
};

}  // namespace eco
