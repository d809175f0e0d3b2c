// The model as data: a table of named parameter specs (shape, role, quantizable, weight decay).
// The transformer, the optimizer, the checkpoint and the memory report all read this table.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"

namespace eco {

enum class ParamRole : uint8_t {
  Embedding,   // token embedding table (also the tied head)
  Position,    // learned position table (gpt2)
  Norm,        // LayerNorm/RMSNorm gain or bias
  Bias,        // linear bias
  Linear,      // linear weight inside a transformer block (quantizable)
  Head,        // untied output head
  Expert,      // an MoE expert's linear weight (quantizable; model/moe_mlp.h)
  Router,      // an MoE router's weight (never quantized: routing decisions stay exact)
};
const char* param_role_name(ParamRole r);
// Whether a parameter of this role may be stored quantized (block linears and expert linears).
bool role_quantizable(ParamRole r);

struct ParamSpec {
  std::string name;            // e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // (out_features, in_features) for linear weights
  ParamRole role;
  bool quantizable;            // role_quantizable(role): block and expert linears
  bool weight_decay;           // matrices yes; gains and biases no
  float init_std;              // normal(0, init_std); 0 -> constant init_value
  float init_value;
  int64_t offset = 0;          // element offset in the flat parameter buffer
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// The parameters of one transformer block: specs[first, end), a contiguous run of the table.
struct BlockParams {
  size_t first = 0;
  size_t end = 0;
};

struct ParamTable {
  std::vector<ParamSpec> specs;
  // Block l's parameters, l in [0, n_layer), recorded by build_param_table; blocks follow the
  // embeddings in order, and the final norm and head follow the last block.
  std::vector<BlockParams> blocks;
  int64_t total = 0;   // elements
  int64_t active = 0;  // elements a token passes through (total, less the unrouted experts)
  // name -> index into specs, filled by build_param_table (a model of thousands of layers looks
  // up every parameter by name; a scan of specs would make that quadratic).
  std::unordered_map<std::string, size_t> index_by_name;

  const ParamSpec& operator[](const std::string& name) const;
  // The index of `name` in specs, -1 when there is none.
  int index_of(const std::string& name) const;
  int64_t count_quantizable() const;
  std::string describe() const;  // a printable table
};

// Build the parameter table for a model config (GPT-2, Llama or Gemma 3 family).
ParamTable build_param_table(const ModelConfig& m);

}  // namespace eco
