// YAML -> Config with strict validation (unknown keys, wrong types, impossible values).
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "core/input_file.h"
#include "base/treatment.h"
#include "core/config_reader.h"
#include "base/math/attention_shape.h"

namespace eco {
namespace {

using namespace config_reader;

void apply_override(YAML::Node& root, const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    usage_error("--set '{}': expected KEY=VALUE, e.g. --set optim.lr=3e-4",
                clip_for_message(kv));
  const std::string key = kv.substr(0, eq);
  const std::string value = kv.substr(eq + 1);
  const std::string shown = clip_for_message(kv);
  if (value.empty()) usage_error("--set '{}': empty value (expected KEY=VALUE)", shown);
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    usage_error("--set '{}': value is not valid YAML ({})", shown, e.msg);
  }
  // Walk the dotted path, creating maps as needed. yaml-cpp nodes are handles, so keep a
  // chain of them and assign at the leaf.
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty())
      usage_error("--set '{}': empty component in key '{}'", shown, clip_for_message(key));
    parts.push_back(p);
  }
  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (next && !next.IsNull() && !next.IsMap())
      usage_error("--set '{}': '{}' is not a section", shown, clip_for_message(parts[i]));
    if (!next || next.IsNull()) cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
    cur.reset(cur[parts[i]]);
  }
  cur[parts.back()] = parsed;
}

// The logical cores of this machine (at least 1), for the bound on train.threads.
int64_t machine_cores() { return std::max<int64_t>(1, std::thread::hardware_concurrency()); }

// The attention keys of the resolved config (to_yaml, model_fingerprint) as text: all of them
// for gemma3; for the other families only those set away from today's behaviour.
std::vector<std::pair<std::string, std::string>> attention_keys(const ModelConfig& m) {
  const bool all = m.family == ModelFamily::Gemma3;
  std::vector<std::pair<std::string, std::string>> out;
  if (all || m.kv_heads() != m.n_head) out.emplace_back("n_kv_head", fmt::format("{}", m.kv_heads()));
  if (all || m.head_dim_override > 0) out.emplace_back("head_dim", fmt::format("{}", m.head_dim()));
  if (all || m.sliding_window > 0) {
    out.emplace_back("sliding_window", fmt::format("{}", m.sliding_window));
    out.emplace_back("sliding_window_pattern", fmt::format("{}", m.sliding_window_pattern));
    out.emplace_back("rope_local_theta", fmt::format("{}", m.rope_local_theta));
  }
  if (all || m.query_pre_attn_scalar > 0)
    out.emplace_back("query_pre_attn_scalar", fmt::format("{}", m.query_scalar()));
  return out;
}

Config from_node(YAML::Node root, const std::string& origin) {
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) usage_error("{}: the top level must be a mapping of sections", origin);
  Config c;
  c.source_path = origin;

  static const std::set<std::string> kSections = {"model",     "data",     "optim", "train",
                                                  "precision", "parallel", "device"};
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      usage_error("{}: a top-level key is {}, expected a section name", origin,
                  kind_name(kv.first));
    const std::string k = kv.first.Scalar();
    if (!seen.insert(k).second)
      usage_error("{}: section '{}' appears more than once", origin, clip_for_message(k));
    if (!kSections.count(k))
      usage_error("{}: unknown top-level key '{}' (expected model, data, optim, train, "
                  "precision, device)",
                  origin, clip_for_message(k));
  }

  {
    SectionReader r(root["model"], "model", origin);
    auto& m = c.model;
    r.get_enum("family", m.family, kFamilyNames);
    m.set_family(m.family);
    const bool gemma3 = m.family == ModelFamily::Gemma3;
    r.get("n_layer", m.n_layer);
    r.get("n_head", m.n_head);
    r.get("d_model", m.d_model);
    r.get("mlp_hidden", m.mlp_hidden);
    r.get("vocab_size", m.vocab_size);
    r.get("seq_len", m.seq_len);
    r.get("max_seq_len", m.max_seq_len);
    m.tie_embeddings = m.family != ModelFamily::Llama;
    r.get("tie_embeddings", m.tie_embeddings);
    if (gemma3) {
      // Gemma 3's defaults (HF Gemma3TextConfig): global base 1e6, local 1e4, window 512.
      m.rope_theta = 1e6f;
      m.norm_eps = 1e-6f;
      m.sliding_window = 512;
    }
    r.get("rope_theta", m.rope_theta);
    r.get("norm_eps", m.norm_eps);
    r.get("n_kv_head", m.n_kv_head);
    r.get("head_dim", m.head_dim_override);
    r.get("sliding_window", m.sliding_window);
    r.get("sliding_window_pattern", m.sliding_window_pattern);
    r.get("rope_local_theta", m.rope_local_theta);
    r.get("query_pre_attn_scalar", m.query_pre_attn_scalar);
    read_moe_config(r, m, origin);
    r.get("init_from", m.init_from);
    r.finish();
    using L = ConfigLimits;
    require_range(m.n_layer, 1, L::kMaxLayers, origin, "model.n_layer");
    require_range(m.n_head, 1, L::kMaxHeads, origin, "model.n_head");
    require_range(m.d_model, 1, L::kMaxDModel, origin, "model.d_model");
    require_range(m.n_kv_head, 0, m.n_head, origin, "model.n_kv_head", " (0 = n_head)");
    require(m.n_head % m.kv_heads() == 0, origin, "model.n_kv_head",
            fmt::format("n_head {} is not divisible by n_kv_head {} (each key/value head serves "
                        "an equal group of query heads)",
                        m.n_head, m.kv_heads()));
    require_range(m.head_dim_override, 0, L::kMaxDModel, origin, "model.head_dim",
                  " (0 = d_model / n_head)");
    if (m.head_dim_override == 0)
      require(m.d_model % m.n_head == 0, origin, "model.d_model",
              fmt::format("d_model {} is not divisible by n_head {} (or set model.head_dim)",
                          m.d_model, m.n_head));
    require(m.positions != PositionKind::Rope || m.head_dim() % 2 == 0, origin,
            m.head_dim_override > 0 ? "model.head_dim" : "model.d_model",
            fmt::format("RoPE needs an even head dimension, got {}", m.head_dim()));
    require(m.attn_width() <= L::kMaxDModel * 16, origin, "model.head_dim",
            fmt::format("n_head x head_dim = {} is too large", m.attn_width()));
    require_range(m.sliding_window, 0, L::kMaxSeqLen, origin, "model.sliding_window",
                  " (0 = no window)");
    require_range(m.sliding_window_pattern, 1, L::kMaxLayers, origin,
                  "model.sliding_window_pattern");
    require_finite(m.rope_local_theta, 1, 1e12, origin, "model.rope_local_theta");
    require(m.query_pre_attn_scalar == 0 ||
                (std::isfinite(m.query_pre_attn_scalar) && m.query_pre_attn_scalar > 0 &&
                 m.query_pre_attn_scalar <= 1e9),
            origin, "model.query_pre_attn_scalar",
            fmt::format("must be 0 (head_dim) or a finite number in (0, 1e9], got {}",
                        m.query_pre_attn_scalar));
    require_range(m.vocab_size, 2, L::kMaxVocab, origin, "model.vocab_size");
    require_range(m.seq_len, 1, L::kMaxSeqLen, origin, "model.seq_len");
    require_range(m.max_seq_len, 0, L::kMaxSeqLen, origin, "model.max_seq_len",
                  " (0 = seq_len)");
    require_range(m.mlp_hidden, 0, L::kMaxMlpHidden, origin, "model.mlp_hidden",
                  " (0 = family default)");
    if (m.max_seq_len == 0) m.max_seq_len = m.seq_len;
    require(m.seq_len <= m.max_seq_len, origin, "model.seq_len",
            fmt::format("seq_len {} exceeds the position table size max_seq_len {}", m.seq_len,
                        m.max_seq_len));
    if (m.mlp_hidden == 0) {
      // In 64 bits: d_model <= 2^20 keeps 4 d and 8 d / 3 well inside int.
      const int64_t d = m.d_model;
      m.mlp_hidden = int(m.mlp == MlpKind::Swiglu ? (8 * d / 3 + 255) / 256 * 256
                         : m.mlp == MlpKind::Geglu ? 6 * d  // Gemma 3 1B: 6912 = 6 x 1152
                                                   : 4 * d);
    }
    require_finite(m.rope_theta, 1, 1e12, origin, "model.rope_theta");
    require(m.norm_eps > 0 && m.norm_eps <= 1, origin, "model.norm_eps",
            fmt::format("must be a finite number in (0, 1], got {}", m.norm_eps));
  }
  {
    SectionReader r(root["data"], "data", origin);
    auto& d = c.data;
    r.get_enum("source", d.source, kDataSourceNames);
    r.get("train", d.train);
    r.get("val", d.val);
    r.get("decode_table", d.decode_table);
    r.get("shuffle", d.shuffle);
    r.finish();
    if (d.source == DataSource::Shards)
      require(!d.train.empty(), origin, "data.train",
              "a path or glob of train shards is required (or set data.source: synthetic)");
  }
  {
    SectionReader r(root["optim"], "optim", origin);
    auto& o = c.optim;
    r.get_enum("name", o.name, kOptimizerNames);
    r.get("lr", o.lr);
    r.get("beta1", o.beta1);
    r.get("beta2", o.beta2);
    r.get("eps", o.eps);
    r.get("weight_decay", o.weight_decay);
    r.get("grad_clip", o.grad_clip);
    r.get("warmup_steps", o.warmup_steps);
    r.get("warmup_frac", o.warmup_frac);
    r.get_enum("schedule", o.schedule, kScheduleNames);
    r.get("final_lr_frac", o.final_lr_frac);
    r.get("warmup_start_lr", o.warmup_start_lr);
    r.get_enum("state_dtype", o.state_dtype, kStateDTypeNames);
    r.finish();
    require(o.lr > 0 && o.lr <= 10, origin, "optim.lr",
            fmt::format("must be a finite number in (0, 10], got {}", o.lr));
    require(o.beta1 >= 0 && o.beta1 < 1, origin, "optim.beta1",
            fmt::format("must be in [0, 1), got {}", o.beta1));
    require(o.beta2 >= 0 && o.beta2 < 1, origin, "optim.beta2",
            fmt::format("must be in [0, 1), got {}", o.beta2));
    require(o.eps > 0 && o.eps <= 1, origin, "optim.eps",
            fmt::format("must be a finite number in (0, 1], got {}", o.eps));
    require_finite(o.weight_decay, 0, 10, origin, "optim.weight_decay");
    require(o.lr * o.weight_decay < 1, origin, "optim.weight_decay",
            fmt::format("lr x weight_decay = {:g} must be < 1 (the decay multiplies each weight "
                        "by 1 - lr x weight_decay)",
                        o.lr * o.weight_decay));
    require_finite(o.grad_clip, 0, 1e30, origin, "optim.grad_clip", " (0 disables clipping)");
    require_range(o.warmup_steps, 0, ConfigLimits::kMaxSteps, origin, "optim.warmup_steps");
    require(o.warmup_frac >= 0 && o.warmup_frac < 1, origin, "optim.warmup_frac",
            fmt::format("must be in [0, 1), got {}", o.warmup_frac));
    require(!(o.warmup_steps > 0 && o.warmup_frac > 0), origin, "optim.warmup_frac",
            "set either warmup_steps or warmup_frac, not both");
    require_finite(o.final_lr_frac, 0, 1, origin, "optim.final_lr_frac");
    require(std::isfinite(o.warmup_start_lr) && o.warmup_start_lr >= 0 && o.warmup_start_lr <= o.lr,
            origin, "optim.warmup_start_lr",
            fmt::format("must be in [0, optim.lr = {}], got {}", o.lr, o.warmup_start_lr));
  }
  {
    SectionReader r(root["train"], "train", origin);
    auto& t = c.train;
    r.get("batch_size", t.batch_size);
    r.get("grad_accum", t.grad_accum);
    r.get("max_steps", t.max_steps);
    r.get("max_tokens", t.max_tokens);
    r.get("log_interval", t.log_interval);
    r.get("eval_interval", t.eval_interval);
    r.get("eval_batches", t.eval_batches);
    r.get("checkpoint_interval", t.checkpoint_interval);
    r.get("keep_checkpoints", t.keep_checkpoints);
    r.get("sample_interval", t.sample_interval);
    r.get("sample_tokens", t.sample_tokens);
    r.get("sample_temperature", t.sample_temperature);
    r.get("seed", t.seed);
    r.get("out_dir", t.out_dir);
    r.get("threads", t.threads);
    r.get("profile", t.profile);
    r.get("spike_factor", t.spike_factor);
    r.get("spike_window", t.spike_window);
    r.finish();
    using L = ConfigLimits;
    require_range(t.batch_size, 1, L::kMaxBatch, origin, "train.batch_size");
    require_range(t.grad_accum, 1, L::kMaxGradAccum, origin, "train.grad_accum");
    require_range(t.max_steps, 0, L::kMaxSteps, origin, "train.max_steps");
    require_range(t.max_tokens, 0, L::kMaxTokens, origin, "train.max_tokens");
    require(t.max_steps > 0 || t.max_tokens > 0, origin, "train.max_steps",
            "set train.max_steps or train.max_tokens to a positive value");
    require(!(t.max_steps > 0 && t.max_tokens > 0), origin, "train.max_tokens",
            "set either train.max_steps or train.max_tokens, not both");
    require(t.log_interval >= 1, origin, "train.log_interval",
            fmt::format("must be >= 1, got {}", t.log_interval));
    require(t.eval_interval >= 0, origin, "train.eval_interval",
            fmt::format("must be >= 0 (0 = no eval), got {}", t.eval_interval));
    require_range(t.eval_batches, 1, L::kMaxEvalBatches, origin, "train.eval_batches");
    require(t.checkpoint_interval >= 0, origin, "train.checkpoint_interval",
            fmt::format("must be >= 0, got {}", t.checkpoint_interval));
    require_range(t.keep_checkpoints, 1, L::kMaxKeepCheckpoints, origin,
                  "train.keep_checkpoints");
    require(t.sample_interval >= 0, origin, "train.sample_interval",
            fmt::format("must be >= 0, got {}", t.sample_interval));
    require_range(t.sample_tokens, 0, L::kMaxSampleTokens, origin, "train.sample_tokens");
    require_finite(t.sample_temperature, 1e-3, 100, origin, "train.sample_temperature");
    require(!t.out_dir.empty(), origin, "train.out_dir", "must not be empty");
    require_range(t.threads, 0, L::kThreadsPerCore * machine_cores(), origin, "train.threads",
                  " (0 = all cores; at most 4 x this machine's cores)");
    require(t.spike_factor == 0 || (t.spike_factor > 1 && t.spike_factor <= 1e6), origin,
            "train.spike_factor",
            fmt::format("must be 0 (off) or a finite number in (1, 1e6], got {}",
                        t.spike_factor));
    require_range(t.spike_window, 1, L::kMaxSpikeWindow, origin, "train.spike_window");
  }
  {
    SectionReader r(root["precision"], "precision", origin);
    std::string name = c.precision.treatment.name;
    r.get("treatment", name);
    r.get_enum("quantize", c.precision.quantize, kQuantizeScopeNames);
    r.finish();
    try {
      c.precision.treatment = treatment_from_name(name);
    } catch (const Error& e) {
      usage_error("{}: key 'precision.treatment': {}", origin, e.what());
    }
  }
  {
    SectionReader r(root["parallel"], "parallel", origin);
    ParallelConfig& p = c.parallel;
    r.get("dp", p.dp);
    r.get("ep", p.ep);
    r.get("zero", p.zero);
    r.get("timeout_s", p.timeout_s);
    r.get("ep_row_factor", p.ep_row_factor);
    r.get("overlap", p.overlap);
    r.finish();
    require(std::isfinite(p.timeout_s) && p.timeout_s >= 0 && p.timeout_s <= 1e7, origin,
            "parallel.timeout_s",
            fmt::format("must be 0 (wait forever) or seconds in (0, 1e7], got {}", p.timeout_s));
    require_range(p.dp, 1, ConfigLimits::kMaxRanks, origin, "parallel.dp");
    require_range(p.ep, 1, ConfigLimits::kMaxRanks, origin, "parallel.ep");
    require(p.ep_row_factor == 0 || (p.ep_row_factor >= 1 && p.ep_row_factor <= p.ep), origin,
            "parallel.ep_row_factor",
            fmt::format("must be 0 (parallel.ep, the worst case) or in [1, parallel.ep = {}], got {}",
                        p.ep, p.ep_row_factor));
    require_range(int64_t(p.dp) * p.ep, 1, ConfigLimits::kMaxRanks, origin, "parallel.dp");
    require(p.zero == 0 || p.zero == 1, origin, "parallel.zero",
            fmt::format("must be 0 or 1, got {}", p.zero));
  }
  if (root["device"] && !root["device"].IsNull()) {
    const YAML::Node d = root["device"];
    if (!d.IsScalar()) usage_error("{}: key 'device' must be 'cpu' or 'cuda'", origin);
    c.device = parse_enum(kDeviceNames, d.Scalar(), origin, "device");
  }
  // Expert parallelism (model/expert_parallel.h): rank e of an expert-parallel group owns
  // experts [e E / ep, (e + 1) E / ep) of every MoE layer.
  if (const ParallelConfig& p = c.parallel; p.ep > 1) {
    const MoeConfig& moe = c.model.moe;
    require(moe.enabled(), origin, "parallel.ep",
            fmt::format("is {}: expert parallelism needs a MoE model (model.moe.n_experts)", p.ep));
    require(moe.n_experts % p.ep == 0, origin, "parallel.ep",
            fmt::format("is {}: it must divide model.moe.n_experts ({}), each rank owning the "
                        "same number of experts",
                        p.ep, moe.n_experts));
  }
  return c;
}

}  // namespace

const char* enum_name(ModelFamily v) { return kFamilyNames(v); }
const char* enum_name(NormKind v) { return kNormNames(v); }
const char* enum_name(MlpKind v) { return kMlpNames(v); }
const char* enum_name(PositionKind v) { return kPositionNames(v); }
const char* enum_name(OptimizerKind v) { return kOptimizerNames(v); }
const char* enum_name(QuantizeScope v) { return kQuantizeScopeNames(v); }
const char* enum_name(LrSchedule v) { return kScheduleNames(v); }
const char* enum_name(StateDType v) { return kStateDTypeNames(v); }
const char* enum_name(DataSource v) { return kDataSourceNames(v); }
const char* enum_name(Device v) { return kDeviceNames(v); }

void ModelConfig::set_family(ModelFamily f) {
  family = f;
  const bool gpt2 = f == ModelFamily::Gpt2, gemma3 = f == ModelFamily::Gemma3;
  norm = gpt2 ? NormKind::LayerNorm : NormKind::RmsNorm;
  mlp = gpt2 ? MlpKind::Gelu : gemma3 ? MlpKind::Geglu : MlpKind::Swiglu;
  positions = gpt2 ? PositionKind::Learned : PositionKind::Rope;
  linear_bias = gpt2;
  post_norms = qk_norm = norm_unit_offset = scale_embeddings = gemma3;
}

bool ModelConfig::structure_matches_family() const {
  ModelConfig derived;
  derived.set_family(family);
  return norm == derived.norm && mlp == derived.mlp && positions == derived.positions &&
         linear_bias == derived.linear_bias && post_norms == derived.post_norms &&
         qk_norm == derived.qk_norm && norm_unit_offset == derived.norm_unit_offset &&
         scale_embeddings == derived.scale_embeddings;
}

void require_device_runs_model(const Config& c) {
  // The CUDA backend runs every family (gemma3's grouped-query, sliding-window attention, QK-norm,
  // GeGLU and (1 + w) norms included); its attention kernels take head sizes up to
  // kCudaAttentionMaxHeadSize (src/base/math/attention_shape.h).
  if (c.device != Device::Cuda) return;
  const ModelConfig& m = c.model;
  require(m.head_dim() <= kCudaAttentionMaxHeadSize, c.source_path,
          m.head_dim_override > 0 ? "model.head_dim" : "model.d_model",
          fmt::format("head size {} on device: cuda: the CUDA attention kernels take head sizes "
                      "up to {} (the flash kernel any size up to it, the mma kernel 32, 64, 128 "
                      "and 256)",
                      m.head_dim(), kCudaAttentionMaxHeadSize));
}

int64_t Config::total_steps() const {
  if (train.max_steps > 0) return train.max_steps;
  return (train.max_tokens + tokens_per_step() - 1) / tokens_per_step();
}

int64_t Config::warmup_steps() const {
  if (optim.warmup_frac > 0) return int64_t(optim.warmup_frac * double(total_steps()));
  return optim.warmup_steps;
}

Config parse_config(const std::string& text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    usage_error("{}:{}:{}: malformed YAML: {}", origin, e.mark.line + 1, e.mark.column + 1,
                e.msg);
  }
  // A second document (after '---') would otherwise be ignored without a word.
  if (documents.size() > 1)
    usage_error("{}: holds {} YAML documents (separated by '---'); a config is one document",
                origin, documents.size());
  YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) usage_error("{}: the top level must be a mapping of sections", origin);
  for (const auto& kv : overrides) apply_override(root, kv);
  return from_node(root, origin);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_small_file(path, "config file", ConfigLimits::kMaxConfigBytes), path,
                      overrides);
}

void check_init_from(const Config& c) {
  const std::string& dir = c.model.init_from;
  if (dir.empty()) return;
  const std::string origin = c.source_path.empty() ? "config" : c.source_path;
  std::error_code ec;
  require(std::filesystem::is_directory(dir, ec), origin, "model.init_from",
          fmt::format("'{}' is not a directory (a Hugging Face checkpoint directory holding "
                      "config.json and model.safetensors was expected)",
                      clip_for_message(dir)));
  require(std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec), origin,
          "model.init_from",
          fmt::format("'{}' holds no config.json (a Hugging Face checkpoint directory was "
                      "expected)",
                      clip_for_message(dir)));
}

std::string to_yaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "family" << YAML::Value << enum_name(c.model.family);
  e << YAML::Key << "n_layer" << YAML::Value << c.model.n_layer;
  e << YAML::Key << "n_head" << YAML::Value << c.model.n_head;
  e << YAML::Key << "d_model" << YAML::Value << c.model.d_model;
  e << YAML::Key << "mlp_hidden" << YAML::Value << c.model.mlp_hidden;
  e << YAML::Key << "vocab_size" << YAML::Value << c.model.vocab_size;
  e << YAML::Key << "seq_len" << YAML::Value << c.model.seq_len;
  e << YAML::Key << "max_seq_len" << YAML::Value << c.model.max_seq_len;
  e << YAML::Key << "tie_embeddings" << YAML::Value << c.model.tie_embeddings;
  e << YAML::Key << "rope_theta" << YAML::Value << c.model.rope_theta;
  e << YAML::Key << "norm_eps" << YAML::Value << c.model.norm_eps;
  // The attention keys only where they are not today's defaults (or for gemma3), so that the
  // resolved config of an existing run stays byte for byte (it is part of the checkpoint).
  for (const auto& [key, value] : attention_keys(c.model))
    e << YAML::Key << key << YAML::Value << value;
  if (c.model.moe.enabled()) write_moe_yaml(e, c.model.moe);
  // Only when set, so that the resolved config of other runs stays byte for byte.
  if (!c.model.init_from.empty()) e << YAML::Key << "init_from" << YAML::Value << c.model.init_from;
  e << YAML::EndMap;
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "source" << YAML::Value << enum_name(c.data.source);
  e << YAML::Key << "train" << YAML::Value << c.data.train;
  e << YAML::Key << "val" << YAML::Value << c.data.val;
  e << YAML::Key << "decode_table" << YAML::Value << c.data.decode_table;
  e << YAML::Key << "shuffle" << YAML::Value << c.data.shuffle;
  e << YAML::EndMap;
  e << YAML::Key << "optim" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << enum_name(c.optim.name);
  e << YAML::Key << "lr" << YAML::Value << c.optim.lr;
  e << YAML::Key << "beta1" << YAML::Value << c.optim.beta1;
  e << YAML::Key << "beta2" << YAML::Value << c.optim.beta2;
  e << YAML::Key << "eps" << YAML::Value << c.optim.eps;
  e << YAML::Key << "weight_decay" << YAML::Value << c.optim.weight_decay;
  e << YAML::Key << "grad_clip" << YAML::Value << c.optim.grad_clip;
  e << YAML::Key << "warmup_steps" << YAML::Value << c.optim.warmup_steps;
  e << YAML::Key << "warmup_frac" << YAML::Value << c.optim.warmup_frac;
  e << YAML::Key << "schedule" << YAML::Value << enum_name(c.optim.schedule);
  e << YAML::Key << "final_lr_frac" << YAML::Value << c.optim.final_lr_frac;
  if (c.optim.warmup_start_lr > 0)  // only when set, as the attention keys above
    e << YAML::Key << "warmup_start_lr" << YAML::Value << c.optim.warmup_start_lr;
  e << YAML::Key << "state_dtype" << YAML::Value << enum_name(c.optim.state_dtype);
  e << YAML::EndMap;
  e << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "batch_size" << YAML::Value << c.train.batch_size;
  e << YAML::Key << "grad_accum" << YAML::Value << c.train.grad_accum;
  e << YAML::Key << "max_steps" << YAML::Value << c.train.max_steps;
  e << YAML::Key << "max_tokens" << YAML::Value << c.train.max_tokens;
  e << YAML::Key << "log_interval" << YAML::Value << c.train.log_interval;
  e << YAML::Key << "eval_interval" << YAML::Value << c.train.eval_interval;
  e << YAML::Key << "eval_batches" << YAML::Value << c.train.eval_batches;
  e << YAML::Key << "checkpoint_interval" << YAML::Value << c.train.checkpoint_interval;
  e << YAML::Key << "keep_checkpoints" << YAML::Value << c.train.keep_checkpoints;
  e << YAML::Key << "sample_interval" << YAML::Value << c.train.sample_interval;
  e << YAML::Key << "sample_tokens" << YAML::Value << c.train.sample_tokens;
  e << YAML::Key << "sample_temperature" << YAML::Value << c.train.sample_temperature;
  e << YAML::Key << "seed" << YAML::Value << c.train.seed;
  e << YAML::Key << "out_dir" << YAML::Value << c.train.out_dir;
  e << YAML::Key << "threads" << YAML::Value << c.train.threads;
  e << YAML::Key << "profile" << YAML::Value << c.train.profile;
  // The detector's keys only when not the default, as precision.quantize below.
  const TrainConfig defaults;
  if (c.train.spike_factor != defaults.spike_factor)
    e << YAML::Key << "spike_factor" << YAML::Value << c.train.spike_factor;
  if (c.train.spike_window != defaults.spike_window)
    e << YAML::Key << "spike_window" << YAML::Value << c.train.spike_window;
  e << YAML::EndMap;
  e << YAML::Key << "precision" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "treatment" << YAML::Value << c.precision.treatment.name;
  // Only when not the default: the resolved config is part of the checkpoint stream, which
  // default runs keep byte for byte.
  if (c.precision.quantize != QuantizeScope::Blocks)
    e << YAML::Key << "quantize" << YAML::Value << enum_name(c.precision.quantize);
  e << YAML::EndMap;
  // Only when not one process, as precision.quantize above.
  if (c.parallel.world() > 1 || c.parallel.zero != 0) {
    e << YAML::Key << "parallel" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "dp" << YAML::Value << c.parallel.dp;
    e << YAML::Key << "ep" << YAML::Value << c.parallel.ep;
    e << YAML::Key << "zero" << YAML::Value << c.parallel.zero;
    e << YAML::Key << "timeout_s" << YAML::Value << c.parallel.timeout_s;
    if (c.parallel.ep_row_factor > 0)
      e << YAML::Key << "ep_row_factor" << YAML::Value << c.parallel.ep_row_factor;
    if (c.parallel.overlap) e << YAML::Key << "overlap" << YAML::Value << true;
    e << YAML::EndMap;
  }
  e << YAML::Key << "device" << YAML::Value << enum_name(c.device);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string model_fingerprint(const Config& c) {
  const auto& m = c.model;
  // The quantization scope only when it is not the default, so that checkpoints written before
  // the key existed (and default runs since) keep their fingerprint.
  // The attention shape as attention_keys writes it (nothing for today's llama and gpt2
  // defaults: their checkpoints keep their fingerprint); rope_local_theta is a trajectory key.
  std::string attention;
  for (const auto& [key, value] : attention_keys(m))
    if (key != "rope_local_theta") attention += fmt::format(" {}={}", key, value);
  const std::string scope = c.precision.quantize == QuantizeScope::Blocks
                                ? std::string()
                                : fmt::format(" quantize={}", enum_name(c.precision.quantize));
  return fmt::format(
      "family={} n_layer={} n_head={} d_model={} mlp_hidden={} vocab_size={} max_seq_len={} "
      "tie_embeddings={} treatment={} optimizer={} state_dtype={}",
      enum_name(m.family), m.n_layer, m.n_head, m.d_model, m.mlp_hidden, m.vocab_size,
      m.max_seq_len, m.tie_embeddings, c.precision.treatment.name, enum_name(c.optim.name),
      enum_name(c.optim.state_dtype)) + scope +
         (m.moe.enabled() ? moe_fingerprint(m.moe) : std::string()) + attention;
}

std::vector<std::string> trajectory_keys(const Config& c) {
  std::vector<std::string> keys = {
      "model.seq_len",      "model.rope_theta",   "model.norm_eps",     "data.source",
      "data.shuffle",       "optim.lr",           "optim.beta1",        "optim.beta2",
      "optim.eps",          "optim.weight_decay", "optim.grad_clip",    "optim.warmup_steps",
      "optim.warmup_frac",  "optim.schedule",     "optim.final_lr_frac", "train.batch_size",
      "train.seed",         "optim.warmup_start_lr", "model.rope_local_theta"};
  // The run's length shapes the lr schedule unless it is constant without a warmup fraction.
  if (c.optim.schedule != LrSchedule::Constant || c.optim.warmup_frac > 0) {
    keys.push_back("train.max_steps");
    keys.push_back("train.max_tokens");
  }
  return keys;
}

std::vector<std::string> trajectory_differences(const std::string& saved_yaml, const Config& c) {
  // Both sides as to_yaml writes them, so equal values have equal text.
  YAML::Node saved;
  try {
    saved = YAML::Load(saved_yaml);
  } catch (const YAML::Exception& e) {
    runtime_error("corrupt checkpoint: its resolved config is not YAML ({})", e.msg);
  }
  const YAML::Node now = YAML::Load(to_yaml(c));
  const auto value = [](const YAML::Node& root, const std::string& key) -> std::string {
    const auto dot = key.find('.');
    const YAML::Node section = root[key.substr(0, dot)];
    if (!section || !section.IsMap()) return "(absent)";  // (parallel: only when several ranks)
    const YAML::Node v = section[key.substr(dot + 1)];
    return v && v.IsScalar() ? v.Scalar() : "(absent)";
  };
  // A number as the shortest text that reads back to it (YAML writes 0.003 as
  // 0.0030000000000000001).
  const auto shown = [](const std::string& text) {
    double d = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    return ec == std::errc() && end == text.data() + text.size() ? fmt::format("{}", d)
                                                                 : clip_for_message(text);
  };
  std::vector<std::string> out;
  for (const std::string& key : trajectory_keys(c)) {
    const std::string was = value(saved, key), is = value(now, key);
    if (was != is)
      out.push_back(fmt::format("{}: {} in the checkpoint, {} now", key, shown(was), shown(is)));
  }
  // The micro-batches of a step: data-parallel ranks x accumulation on each. Any split of the
  // same number continues the same training (the ranks read the windows one rank accumulating
  // them would, and the gradient fold is the same), so a run may resume at another world size.
  const auto micro_batches = [&](const YAML::Node& root) -> std::pair<int64_t, std::string> {
    const std::string dp = value(root, "parallel.dp"), ep = value(root, "parallel.ep"),
                      accum = value(root, "train.grad_accum");
    // Every rank of dp x ep reads its own micro-batch.
    const int64_t d = dp == "(absent)" ? 1 : std::stoll(dp);
    const int64_t e = ep == "(absent)" ? 1 : std::stoll(ep);
    const int64_t a = accum == "(absent)" ? 1 : std::stoll(accum);
    return {d * e * a, fmt::format("{} x {} x {} = {}", d, e, a, d * e * a)};
  };
  const auto [was_n, was_text] = micro_batches(saved);
  const auto [is_n, is_text] = micro_batches(now);
  if (was_n != is_n)
    out.push_back(fmt::format("parallel.dp x parallel.ep x train.grad_accum (micro-batches a step): {} in the "
                              "checkpoint, {} now",
                              was_text, is_text));
  return out;
}

}  // namespace eco
