// The storage policy (storage_policy.h): the treatment's choices applied to one parameter.
#include "quant/storage_policy.h"

namespace eco {

ParamStorage storage_policy(const Treatment& t, bool block_linear) {
  ParamStorage s;
  if (!block_linear) return s;  // plain: the parameter itself, in the backend dtype
  s.quantized = t.quantized;
  s.format = t.format;
  s.granularity = t.granularity;
  s.value = !t.quantized || t.master;
  s.master = t.master || t.bf16_weights;
  s.bf16_compute = t.bf16_weights;
  return s;
}

}  // namespace eco
