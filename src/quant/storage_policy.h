// The storage policy: how one parameter is held under the run's treatment and quantization scope
// (a value in the backend dtype, a QTensor of codes + scales, a fp32 master copy, a bf16 compute
// copy). ParamStore allocates what this says; nothing else decides it.
#pragma once
#include "core/config.h"
#include "base/treatment.h"

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
  // What the forward does to this linear's input (the treatment's cast for a treated linear;
  // None for a parameter the treatment does not reach).
  ActCast act = ActCast::None;
};

// What the policy needs to know of a parameter (the table's ParamSpec, model/param_table.h).
struct ParamKind {
  bool quantizable = false;  // a block linear or an expert linear (role_quantizable)
  bool expert = false;       // an expert's linear weight (ParamRole::Expert)
};

// Whether the treatment reaches a parameter: quantizable, and inside the scope (blocks: every
// quantizable parameter; experts: only the experts' weights).
bool in_quantize_scope(QuantizeScope scope, ParamKind p);

// The storage of a parameter under treatment t and scope; a parameter outside the scope is
// plain (the parameter itself in the backend dtype, its input not cast), as under fp32.
ParamStorage storage_policy(const Treatment& t, QuantizeScope scope, ParamKind p);

}  // namespace eco
