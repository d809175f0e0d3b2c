// The run configuration: YAML file + `--set key=value` overrides, loaded into validated structs.
// Every key is checked: unknown keys, wrong types and impossible values raise one usage error
// naming the file and the key (exit code 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace eco {

struct ModelConfig {
  std::string family = "gpt2";  // gpt2 | llama
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  int mlp_hidden = 0;      // 0: gpt2 -> 4 d, llama -> 8d/3 rounded up to a multiple of 256
  int vocab_size = 256;
  int seq_len = 64;        // training context
  int max_seq_len = 0;     // position table size (gpt2) / RoPE limit; 0 -> seq_len
  bool tie_embeddings = true;  // default depends on family (gpt2 tied, llama untied)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;

  int head_dim() const { return d_model / n_head; }
  bool is_llama() const { return family == "llama"; }
};

struct DataConfig {
  std::string source = "shards";  // shards | synthetic
  std::string train;              // path or glob of train shards
  std::string val;                // path or glob of val shards (optional)
  std::string decode_table;       // optional; default: decode_table.bin next to the train shards
  bool shuffle = true;
};

struct OptimConfig {
  std::string name = "adamw";     // adamw | sgdm (SGD with EMA momentum beta1)
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;         // 0 disables clipping
  int64_t warmup_steps = 0;       // or warmup_frac * max_steps when warmup_frac > 0
  double warmup_frac = 0.0;
  std::string schedule = "cosine";  // cosine | linear | constant
  double final_lr_frac = 0.1;       // lr at the end of the decay, as a fraction of lr
  std::string state_dtype = "fp32"; // fp32 | bf16: optimizer moments of quantized parameters
};

struct TrainConfig {
  int batch_size = 8;
  int grad_accum = 1;
  int64_t max_steps = 0;          // one of max_steps / max_tokens must be set
  int64_t max_tokens = 0;
  int log_interval = 10;
  int eval_interval = 0;          // 0 = no periodic eval (a final eval still runs if val data exists)
  int eval_batches = 20;
  int checkpoint_interval = 0;    // 0 = only the final checkpoint
  int keep_checkpoints = 2;
  int sample_interval = 0;        // 0 = only a final sample
  int sample_tokens = 200;
  double sample_temperature = 1.0;
  uint64_t seed = 1337;
  std::string out_dir = "runs/default";
  int threads = 0;                // 0 = all cores
  bool profile = false;           // per-operation ms/step breakdown (CUDA backend)
};

struct PrecisionConfig {
  std::string treatment = "fp32";  // see src/quant/treatment.h for the list
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  PrecisionConfig precision;
  std::string device = "cpu";     // cpu | cuda
  std::string source_path;        // the YAML file it came from (for messages)

  int64_t tokens_per_step() const {
    return int64_t(train.batch_size) * train.grad_accum * model.seq_len;
  }
  int64_t total_steps() const;    // max_steps, or ceil(max_tokens / tokens_per_step)
  int64_t warmup_steps() const;
};

// Load a YAML file, apply `key=value` overrides (dotted keys, YAML-typed values), validate.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from YAML text (tests); `origin` names it in messages.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});
// The fully resolved configuration (every key, defaults filled in) as YAML.
std::string to_yaml(const Config& cfg);
// The part of the config a checkpoint must agree with to resume (model shape, treatment).
std::string model_fingerprint(const Config& cfg);

}  // namespace eco
