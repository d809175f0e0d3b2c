// A block's linear layer: out = cast(inp) @ W^T + b with W read through the parameter store,
// plain or quantized (ParamStore::linear_weight), forward and backward side by side.
#pragma once
#include "model/model_context.h"

namespace eco {

struct LinearRef {
  int weight = -1, bias = -1;  // table indices; bias -1 when the family has none
};

// out (N, OC) = cast(inp (N, C)) @ W^T + b, the input cast as this weight's treatment says
// (ParamStorage::act); the cast input is written to cast_inp (inp itself: cast in place), which
// is what the backward must see.
void linear_forward(const ModelContext& ctx, LinearRef l, const Tensor& out, const Tensor& inp,
                    const Tensor& cast_inp, int N, int C, int OC);
// dinp += dout @ W, and the weight and bias gradients, on the weight the forward used
// (quantized: its dequantized codes) and cast_inp, the input as that forward cast it.
void linear_backward(const ModelContext& ctx, LinearRef l, const Tensor& dinp, const Tensor& dout,
                     const Tensor& cast_inp, int N, int C, int OC);

}  // namespace eco
