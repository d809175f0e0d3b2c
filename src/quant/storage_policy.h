// The storage policy: how one parameter is held under the run's treatment (a value in the backend
// dtype, a QTensor of codes + scales, a fp32 master copy, a bf16 compute copy). ParamStore
// allocates what this says; nothing else decides it.
#pragma once
#include "core/treatment.h"

namespace eco {

struct ParamStorage {
  // Held as a QTensor of this format and granularity (the only copy the forward may use).
  bool quantized = false;
  QFormat format = QFormat::E4M3;
  Granularity granularity = Granularity::PerRow;
  // A tensor in the backend dtype exists: the parameter itself, or (master) the trainable
  // high-precision copy of a parameter whose forward uses another representation.
  bool value = true;
  bool master = false;
  // The forward uses the value rounded to bf16 (a compute copy, unless the GEMMs round it).
  bool bf16_compute = false;
};

// The storage of a parameter under treatment t; `block_linear`: a linear weight inside a
// transformer block (ParamSpec::quantizable), the only parameters a treatment changes.
ParamStorage storage_policy(const Treatment& t, bool block_linear);

}  // namespace eco
