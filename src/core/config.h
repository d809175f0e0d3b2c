// The run configuration: YAML file + `--set key=value` overrides, loaded into validated structs.
// Every key is checked: unknown keys, wrong types and impossible values raise one usage error
// naming the file and the key (exit code 2). Every choice is parsed once, here, into an enum (or
// the Treatment); it is written back (to_yaml, model_fingerprint, fmt) by its config name. Each
// key is one row of the key table (core/config_table.h).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/device.h"
#include "core/moe_config.h"
#include "base/treatment.h"

namespace eco {

enum class ModelFamily : uint8_t { Gpt2, Llama, Gemma3 };
// A family's block structure: which norm, which MLP, how positions enter, whether the block
// linears have biases (ModelConfig::set_family derives them).
enum class NormKind : uint8_t { LayerNorm, RmsNorm };  // LayerNorm: gain and bias; RmsNorm: gain
// Swiglu, Geglu: fc is gate and up, (2H, C); act = silu(gate) * up | gelu_tanh(gate) * up.
enum class MlpKind : uint8_t { Gelu, Swiglu, Geglu };
inline bool mlp_gated(MlpKind k) { return k != MlpKind::Gelu; }
enum class PositionKind : uint8_t { Learned, Rope };   // Learned: a wpe table; Rope: rotary q, k
enum class OptimizerKind : uint8_t { AdamW, Sgdm };
enum class LrSchedule : uint8_t { Cosine, Linear, Constant };
enum class StateDType : uint8_t { Fp32, Bf16 };
enum class DataSource : uint8_t { Shards, Synthetic };
// Which parameters a quantized treatment applies to: every block linear (blocks), or only the
// experts' linear weights (experts: the paper's SMoE recipe; a dense model then has none).
enum class QuantizeScope : uint8_t { Blocks, Experts };

// The config name of each value ("gpt2", "adamw", "cosine", ...; structure kinds: "layernorm",
// "rmsnorm", "gelu", "swiglu", "geglu", "learned", "rope").
const char* enum_name(ModelFamily v);
const char* enum_name(NormKind v);
const char* enum_name(MlpKind v);
const char* enum_name(PositionKind v);
const char* enum_name(OptimizerKind v);
const char* enum_name(LrSchedule v);
const char* enum_name(StateDType v);
const char* enum_name(DataSource v);
const char* enum_name(QuantizeScope v);

// The bounds load_config enforces beyond "positive": large enough for any real run, small enough
// that every derived size (4 d, B x T x C, tokens per step) fits int64 and that a typo (an extra
// three zeros) is refused at once instead of hanging or overflowing. The memory a config needs is
// checked separately against the device (train/memory_check.h).
struct ConfigLimits {
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxHeads = 65536;
  static constexpr int64_t kMaxDModel = 1 << 20;
  static constexpr int64_t kMaxMlpHidden = 1 << 22;
  static constexpr int64_t kMaxExperts = 1 << 16;  // routed or shared, per MoE layer
  static constexpr int64_t kMaxVocab = 1 << 28;
  static constexpr int64_t kMaxSeqLen = 1 << 24;
  static constexpr int64_t kMaxBatch = 1 << 20;
  static constexpr int64_t kMaxGradAccum = 16384;
  static constexpr int64_t kMaxRanks = 1 << 16;
  static constexpr int64_t kMaxEvalBatches = 10000;
  static constexpr int64_t kMaxSampleTokens = 100000;
  static constexpr int64_t kMaxKeepCheckpoints = 10000;
  static constexpr int64_t kMaxSpikeWindow = 100000;
  static constexpr int64_t kMaxSteps = 1000000000000;    // 1e12
  static constexpr int64_t kMaxTokens = 1000000000000000;  // 1e15
  static constexpr int64_t kThreadsPerCore = 4;  // train.threads <= 4 x the cores
  static constexpr int64_t kMaxConfigBytes = 1 << 20;  // a config file is at most 1 MiB
};

struct ModelConfig {
  // The family names the model (config, fingerprint); the model reads the structure below,
  // which set_family derives from it (the loader calls it; so must code that builds a config).
  ModelFamily family = ModelFamily::Gpt2;
  NormKind norm = NormKind::LayerNorm;
  MlpKind mlp = MlpKind::Gelu;
  PositionKind positions = PositionKind::Learned;
  bool linear_bias = true;  // the block linears (qkv, proj, fc, mlp proj) have biases
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  int mlp_hidden = 0;      // 0: gpt2 -> 4 d, llama -> 8d/3 rounded up to a multiple of 256
  int vocab_size = 256;
  int seq_len = 64;        // training context
  int max_seq_len = 0;     // position table size (gpt2) / RoPE limit; 0 -> seq_len
  bool tie_embeddings = true;  // default depends on family (gpt2 tied, llama untied)
  float rope_theta = 10000.0f;   // gemma3: the global layers' base (1e6)
  float norm_eps = 1e-5f;
  MoeConfig moe;  // model.moe; n_experts 0 (the default): dense
  // Attention shape (any family; gemma3 needs them). Grouped-query attention: n_kv_head key/value
  // heads, each shared by n_head / n_kv_head query heads; 0: n_head (multi-head attention).
  int n_kv_head = 0;
  int head_dim_override = 0;  // model.head_dim; 0: d_model / n_head
  // Sliding-window causal attention: query t sees keys (t - sliding_window, t] in the local
  // layers, which are every layer l with (l + 1) % sliding_window_pattern != 0 (Gemma 3: 5 of
  // every 6); the others are global (plain causal). 0: no window, every layer global.
  int sliding_window = 0;
  int sliding_window_pattern = 6;
  float rope_local_theta = 10000.0f;  // the RoPE base of the local layers
  // Queries are scaled by query_pre_attn_scalar^-0.5; 0: head_dim (the usual 1/sqrt(head_dim)).
  float query_pre_attn_scalar = 0.0f;
  // Structure flags set_family derives (gemma3: all true).
  bool post_norms = false;        // RMSNorm after attention and after the MLP, before the residual
  bool qk_norm = false;           // RMSNorm over head_dim of every q and k head, before RoPE
  bool norm_unit_offset = false;  // norms scale by (1 + w), w initialised to 0 (Gemma)
  bool scale_embeddings = false;  // token embeddings times sqrt(d_model) after the lookup
  // A Hugging Face checkpoint directory (config.json + safetensors) whose weights replace the
  // random initialisation of a fresh run (src/hf/hf_import.h); "" for none. --resume ignores it.
  std::string init_from;

  int head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Width of the attention output (the proj linear's input): n_head x head_dim.
  int64_t attn_width() const { return int64_t(n_head) * head_dim(); }
  // Rows of the fused qkv linear: [q (n_head heads) | k (kv heads) | v (kv heads)] x head_dim.
  int64_t qkv_rows() const { return int64_t(n_head + 2 * kv_heads()) * head_dim(); }
  // Whether layer l attends within the sliding window (a local layer).
  bool layer_is_local(int l) const {
    return sliding_window > 0 && (l + 1) % sliding_window_pattern != 0;
  }
  float layer_rope_theta(int l) const { return layer_is_local(l) ? rope_local_theta : rope_theta; }
  float query_scalar() const {
    return query_pre_attn_scalar > 0 ? query_pre_attn_scalar : float(head_dim());
  }
  bool norm_bias() const { return norm == NormKind::LayerNorm; }
  // Rows of the MLP's first linear: H, or 2H for the gated MLPs' gate and up projections.
  int64_t fc_rows() const { return mlp_gated(mlp) ? 2 * int64_t(mlp_hidden) : mlp_hidden; }
  // Sets the family and its structure: gpt2: LayerNorm, GELU, learned positions, biases;
  // llama: RMSNorm, SwiGLU, RoPE, no biases; gemma3: RMSNorm (1 + w) before and after attention
  // and MLP, QK-norm, GeGLU, RoPE, no biases, embeddings scaled by sqrt(d_model).
  void set_family(ModelFamily f);
  // Whether the structure is the family's (what set_family would set).
  bool structure_matches_family() const;
};

struct DataConfig {
  DataSource source = DataSource::Shards;
  std::string train;              // path or glob of train shards
  std::string val;                // path or glob of val shards (optional)
  std::string decode_table;       // optional; default: decode_table.bin next to the train shards
  bool shuffle = true;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::AdamW;  // adamw | sgdm (SGD with EMA momentum beta1)
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;         // 0 disables clipping
  int64_t warmup_steps = 0;       // or warmup_frac * max_steps when warmup_frac > 0
  double warmup_frac = 0.0;
  LrSchedule schedule = LrSchedule::Cosine;
  double final_lr_frac = 0.1;       // lr at the end of the decay, as a fraction of lr
  double warmup_start_lr = 0.0;     // the warmup rises linearly from this to lr
  StateDType state_dtype = StateDType::Fp32;  // optimizer moments of quantized parameters
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
  // CPU threads: 0 = all cores; kThreadsAuto ("auto") = the cores other processes leave free,
  // measured at the start of the run (kernels/cpu/thread_runtime.h).
  static constexpr int kThreadsAuto = -1;
  int threads = 0;
  bool profile = false;           // per-operation ms/step breakdown (CUDA backend)
  // Loss-spike detector (train/loss_spike.h): a step whose loss exceeds spike_factor x (and 1
  // nat above) the lowest median of spike_window consecutive losses seen so far stops the run as
  // diverged (exit 1) before its update and checkpoint. 0 disables it.
  double spike_factor = 4.0;
  int spike_window = 20;
};

struct PrecisionConfig {
  Treatment treatment;  // fp32 by default; the names are base/treatment.h's
  QuantizeScope quantize = QuantizeScope::Blocks;  // which parameters the treatment applies to
};

// How the processes of a run share the work; the launcher (mpirun, srun) must start dp x ep
// processes. Data parallelism: every rank reads its own micro-batch of train.batch_size, and the
// gradients are summed in rank order. Expert parallelism (model/expert_parallel.h): the routed
// experts of every MoE layer are split over ep ranks, each owning n_experts / ep of them (ep > 1
// needs a MoE model whose n_experts it divides). ZeRO-1 (zero: 1): each rank keeps the optimizer
// state of its own rows of every parameter (optim/zero_shards.h).
struct ParallelConfig {
  int dp = 1;    // data-parallel ranks
  int ep = 1;    // expert-parallel ranks: the routed experts split over them (world = dp x ep)
  int zero = 0;  // 0: every rank holds the whole optimizer state; 1: ZeRO-1
  // A collective that waits longer than this for the other ranks in the training steps ends
  // the run (a rank that is stuck, or gone without the launcher noticing); 0: wait forever.
  double timeout_s = 600;
  // The same bound while the ranks read the checkpoint to resume or model.init_from, checkpoint
  // (rank 0 writes, the others wait for it), evaluate or sample: max(timeout_s,
  // phase_timeout_s); 0 in either key: wait forever.
  double phase_timeout_s = 3600;
  // Expert parallelism: the rows a rank's experts can take in a layer, as a multiple of the
  // balanced load (one source's rows); 0: ep, the worst case (every source's rows routed to one
  // rank's experts), which always fits. Less saves activation memory; a step that routes more
  // rows to a rank grows that layer's buffers there and warns (it does not change the bits).
  double ep_row_factor = 0;
  // Sum each block's gradients while the backward computes the blocks below it; the bits do not
  // depend on it. Host-memory backends: a worker thread runs the MPI sums (under expert
  // parallelism MPI must allow calls from several threads at once). CUDA: NCCL on a second
  // stream, not under expert parallelism (its NCCL token exchanges beside the sums could
  // deadlock). Where some rank cannot, the sums run after the backward and the log says why.
  // Off by default: on one node, where the ranks' threads fill the cores, the worker competes
  // with the backward for them.
  bool overlap = false;
  int world() const { return dp * ep; }
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  PrecisionConfig precision;
  ParallelConfig parallel;
  Device device = Device::Cpu;
  std::string source_path;        // the YAML file it came from (for messages)

  // Global: every rank's micro-batches (each of the dp x ep ranks reads its own).
  int64_t tokens_per_step() const {
    return int64_t(train.batch_size) * train.grad_accum * model.seq_len * parallel.world();
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
// model.init_from, when set, names a Hugging Face checkpoint directory holding config.json: a
// usage error naming the key otherwise. Checked where the directory is read (a fresh start), not
// when the config loads: --plan and --resume never read it.
void check_init_from(const Config& cfg);
std::string to_yaml(const Config& cfg);
// The part of the config a checkpoint must agree with to resume (model shape, treatment).
std::string model_fingerprint(const Config& cfg);
// The keys besides the model's shape that set a run's trajectory (seed, lr, batch, schedule,
// ...), as "section.key": a checkpoint resumes only where they equal its resolved config's.
std::vector<std::string> trajectory_keys(const Config& cfg);
// Each trajectory key whose value in `saved_yaml` (a checkpoint's resolved config, to_yaml's
// text) differs from `cfg`'s, as "optim.lr: 0.001 in the checkpoint, 0.003 now".
std::vector<std::string> trajectory_differences(const std::string& saved_yaml, const Config& cfg);

// A usage error naming the key when cfg.device cannot run cfg.model (cuda: a head size above the
// CUDA attention's limit, 256). The trainer calls it before it makes the backend; --plan does
// not.
void require_device_runs_model(const Config& cfg);

// A Treatment serialises to JSON (nlohmann, found by argument-dependent lookup) as its name.
template <class Json>
void to_json(Json& j, const Treatment& t) {
  j = t.name;
}

template <class E>
concept ConfigEnum = std::is_enum_v<E> && requires(E e) { enum_name(e); };

}  // namespace eco

// fmt prints a config enum by its config name, and a Treatment by its name.
template <eco::ConfigEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(E v, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(eco::enum_name(v), ctx);
  }
};
template <>
struct fmt::formatter<eco::Treatment> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const eco::Treatment& t, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(t.name, ctx);
  }
};
