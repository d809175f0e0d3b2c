// How ecotrain's parameters are named and laid out in a Hugging Face checkpoint of the matching
// transformers class: one entry per HF tensor, saying which rows of which ecotrain parameter it
// holds and whether it is stored transposed. Export and import both walk this list, so the two
// directions cannot disagree. The table is in docs/hf-interop.md, "Names".
//   gpt2   -> GPT2LMHeadModel    (Conv1D weights stored (in, out): transposed)
//   llama  -> LlamaForCausalLM   (fused qkv split into q/k/v_proj, fc into gate/up_proj)
//   gemma3 -> Gemma3ForCausalLM  (text model; norms keep (1 + w), as ecotrain stores them)
//   llama + model.moe -> MixtralForCausalLM when the experts are Mixtral's (no shared experts,
//                        every layer MoE, gates renormalised to sum 1), else DeepSeek-MoE's
//                        DeepseekForCausalLM naming (shared experts, first dense layers,
//                        softmax gates with or without renormalisation)
// RoPE needs no permutation: ecotrain rotates (x_i, x_{i + hd/2}) pairs, HF's rotate_half.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/param_table.h"

namespace eco {

enum class HfArch : uint8_t { Gpt2, Llama, Gemma3, Mixtral, DeepseekMoe };
const char* hf_architecture(HfArch a);  // "GPT2LMHeadModel", ...
const char* hf_model_type(HfArch a);    // config.json's model_type: "gpt2", "llama", ...

// The HF class a model is written as; a usage error naming the reason when it has none
// (gpt2 or gemma3 with experts, grouped-query gpt2, the sigmoid_bias router, ...).
HfArch hf_arch_of(const ModelConfig& m);

// Rows [row0, row0 + rows) of ecotrain parameter `param` (a 1-D parameter's elements are its
// rows, of one column), stored under hf_name with hf_shape; transposed: HF holds the (rows,
// cols) block as (cols, rows) (GPT-2's Conv1D).
struct HfTensorMap {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  size_t param = 0;
  int64_t row0 = 0, rows = 0, cols = 1;
  bool transposed = false;
};

// Every HF tensor of the model, in table order. Each ecotrain parameter is covered exactly once
// (asserted), so an import that fills every entry sets every parameter.
std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& m, const ParamTable& table);

// Tensors a HF checkpoint of `a` may hold that carry no weights ecotrain needs: GPT-2's causal
// mask buffers (h.N.attn.bias, h.N.attn.masked_bias) in checkpoints saved by old transformers.
bool hf_ignorable(HfArch a, const std::string& hf_name);

}  // namespace eco
