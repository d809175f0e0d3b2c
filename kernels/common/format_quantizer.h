// FormatQuantizer: the Quantizer that eco_update.h's group update expects, built from a QFormat,
// a rounding mode and the SR random stream's key (seed, step, tensor id). Both backends use it,
// so their codes and SR decisions are bit-identical.
#pragma once
#include <cstdint>

#include "kernels/common/hd.h"
#include "kernels/common/philox.h"
#include "kernels/common/qformat.h"

namespace eco {

struct FormatQuantizer {
  QFormat format;
  Rounding rounding;
  uint64_t seed, step;
  uint32_t tensor_id;

  ECO_HD float scale_for(float absmax) const { return group_scale(format, absmax); }
  ECO_HD uint8_t encode(float x, float scale, int64_t elem) const {
    const uint32_t bits =
        rounding == Rounding::SR ? philox_bits(seed, step, tensor_id, uint64_t(elem)) : 0u;
    return quantize_value(format, rounding, x, scale, bits);
  }
  ECO_HD float decode(uint8_t code, float scale) const {
    return dequantize_value(format, code, scale);
  }
  ECO_HD uint8_t load(const uint8_t* codes, int64_t i) const { return load_code(format, codes, i); }
  ECO_HD void store(uint8_t* codes, int64_t i, uint8_t c) const { store_code(format, codes, i, c); }
};

}  // namespace eco
