// The storage policy (storage_policy.h): the treatment's choices applied to one parameter.
#include "quant/storage_policy.h"

namespace eco {

bool in_quantize_scope(QuantizeScope scope, ParamKind p) {
  if (!p.quantizable) return false;
  return scope == QuantizeScope::Blocks || p.expert;
}

ParamStorage storage_policy(const Treatment& t, QuantizeScope scope, ParamKind p) {
  ParamStorage s;
  if (!in_quantize_scope(scope, p)) return s;  // plain: the parameter itself, in the backend dtype
  s.quantized = t.quantized;
  s.format = t.format;
  s.granularity = t.granularity;
  s.value = !t.quantized || t.master;
  s.master = t.master || t.bf16_weights;
  s.bf16_compute = t.bf16_weights;
  s.act = t.act;
  return s;
}

}  // namespace eco
