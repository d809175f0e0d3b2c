// YAML -> Config with strict validation (unknown keys, wrong types, impossible values), and back:
// loops over the key table (config_table.h), with the checks that span keys written out here.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "base/error.h"
#include "core/input_file.h"
#include "base/treatment.h"
#include "core/config_reader.h"
#include "core/config_table.h"
#include "base/math/attention_shape.h"

namespace eco {
namespace {

using namespace config_reader;
using namespace config_table;

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

// The cross-key checks and the derived defaults of the model section, after its table read.
void check_model(ModelConfig& m, const std::string& origin) {
  using L = ConfigLimits;
  require_range(m.n_kv_head, 0, m.n_head, origin, "model.n_kv_head", " (0 = n_head)");
  require(m.n_head % m.kv_heads() == 0, origin, "model.n_kv_head",
          fmt::format("n_head {} is not divisible by n_kv_head {} (each key/value head serves "
                      "an equal group of query heads)",
                      m.n_head, m.kv_heads()));
  if (m.head_dim_override == 0)
    require(m.d_model % m.n_head == 0, origin, "model.d_model",
            fmt::format("d_model {} is not divisible by n_head {} (or set model.head_dim)",
                        m.d_model, m.n_head));
  require(m.positions != PositionKind::Rope || m.head_dim() % 2 == 0, origin,
          m.head_dim_override > 0 ? "model.head_dim" : "model.d_model",
          fmt::format("RoPE needs an even head dimension, got {}", m.head_dim()));
  require(m.attn_width() <= L::kMaxDModel * 16, origin, "model.head_dim",
          fmt::format("n_head x head_dim = {} is too large", m.attn_width()));
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
}

void check_optim(const OptimConfig& o, const std::string& origin) {
  require(o.lr * o.weight_decay < 1, origin, "optim.weight_decay",
          fmt::format("lr x weight_decay = {:g} must be < 1 (the decay multiplies each weight "
                      "by 1 - lr x weight_decay)",
                      o.lr * o.weight_decay));
  require(!(o.warmup_steps > 0 && o.warmup_frac > 0), origin, "optim.warmup_frac",
          "set either warmup_steps or warmup_frac, not both");
  require(std::isfinite(o.warmup_start_lr) && o.warmup_start_lr >= 0 && o.warmup_start_lr <= o.lr,
          origin, "optim.warmup_start_lr",
          fmt::format("must be in [0, optim.lr = {}], got {}", o.lr, o.warmup_start_lr));
}

void check_train(const TrainConfig& t, const std::string& origin) {
  require(t.max_steps > 0 || t.max_tokens > 0, origin, "train.max_steps",
          "set train.max_steps or train.max_tokens to a positive value");
  require(!(t.max_steps > 0 && t.max_tokens > 0), origin, "train.max_tokens",
          "set either train.max_steps or train.max_tokens, not both");
}

void check_parallel(const ParallelConfig& p, const std::string& origin) {
  require(p.ep_row_factor == 0 || (p.ep_row_factor >= 1 && p.ep_row_factor <= p.ep), origin,
          "parallel.ep_row_factor",
          fmt::format("must be 0 (parallel.ep, the worst case) or in [1, parallel.ep = {}], got {}",
                      p.ep, p.ep_row_factor));
  require_range(int64_t(p.dp) * p.ep, 1, ConfigLimits::kMaxRanks, origin, "parallel.dp");
}

Config from_node(YAML::Node root, const std::string& origin) {
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) usage_error("{}: the top level must be a mapping of sections", origin);
  Config c;
  c.source_path = origin;

  const std::set<std::string> sections = {
      model_section().name,     data_section().name,     optim_section().name,
      train_section().name,     precision_section().name, parallel_section().name,
      "device"};
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      usage_error("{}: a top-level key is {}, expected a section name", origin,
                  kind_name(kv.first));
    const std::string k = kv.first.Scalar();
    if (!seen.insert(k).second)
      usage_error("{}: section '{}' appears more than once", origin, clip_for_message(k));
    if (!sections.count(k))
      usage_error("{}: unknown top-level key '{}' (expected model, data, optim, train, "
                  "precision, parallel, device)",
                  origin, clip_for_message(k));
  }

  // Each section: its table's keys (types, unknown keys, each key's bounds), then the checks
  // that span its keys.
  read_section(root["model"], model_section(), c.model, origin);
  check_model(c.model, origin);
  read_section(root["data"], data_section(), c.data, origin);
  if (c.data.source == DataSource::Shards)
    require(!c.data.train.empty(), origin, "data.train",
            "a path or glob of train shards is required (or set data.source: synthetic)");
  read_section(root["optim"], optim_section(), c.optim, origin);
  check_optim(c.optim, origin);
  read_section(root["train"], train_section(), c.train, origin);
  check_train(c.train, origin);
  read_section(root["precision"], precision_section(), c.precision, origin);
  read_section(root["parallel"], parallel_section(), c.parallel, origin);
  check_parallel(c.parallel, origin);
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
  const std::string shown = clip_for_message(dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    const std::string kind = non_regular_kind(dir);
    require(false, origin, "model.init_from",
            fmt::format("'{}' is not a directory: it is {} (a Hugging Face checkpoint directory "
                        "holding config.json and model.safetensors was expected)",
                        shown, kind.empty() ? "a regular file" : kind));
  }
  const std::string config_json = (std::filesystem::path(dir) / "config.json").string();
  const std::string kind = non_regular_kind(config_json);
  require(kind != "missing", origin, "model.init_from",
          fmt::format("'{}' holds no config.json (a Hugging Face checkpoint directory was "
                      "expected)",
                      shown));
  require(kind.empty(), origin, "model.init_from",
          fmt::format("'{}/config.json' is {}, not a regular file (a Hugging Face checkpoint "
                      "directory holds its config.json as a file)",
                      shown, kind));
}

std::string to_yaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "model" << YAML::Value;
  write_section(e, model_section(), c.model);
  e << YAML::Key << "data" << YAML::Value;
  write_section(e, data_section(), c.data);
  e << YAML::Key << "optim" << YAML::Value;
  write_section(e, optim_section(), c.optim);
  e << YAML::Key << "train" << YAML::Value;
  write_section(e, train_section(), c.train);
  e << YAML::Key << "precision" << YAML::Value;
  write_section(e, precision_section(), c.precision);
  // Only for several processes or ZeRO, as an optional key (config_table.h).
  if (c.parallel.world() > 1 || c.parallel.zero != 0) {
    e << YAML::Key << "parallel" << YAML::Value;
    write_section(e, parallel_section(), c.parallel);
  }
  e << YAML::Key << "device" << YAML::Value << enum_name(c.device);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string model_fingerprint(const Config& c) {
  // The text a checkpoint stores and a resume compares: the shape keys every resolved config
  // has, then the optional ones that are written (model.moe's as one group), so that a run
  // leaving an optional key alone has the fingerprint it had without it.
  std::vector<std::string> parts;
  append_shape(parts, model_section(), c.model, false);
  append_shape(parts, precision_section(), c.precision, false);
  append_shape(parts, optim_section(), c.optim, false);
  append_shape(parts, precision_section(), c.precision, true);
  if (c.model.moe.enabled()) {
    std::vector<std::string> moe;
    append_shape(moe, moe_section(), c.model.moe, false);
    parts.push_back(fmt::format("moe({})", fmt::join(moe, " ")));
  }
  append_shape(parts, model_section(), c.model, true);
  return fmt::format("{}", fmt::join(parts, " "));
}

std::vector<std::string> trajectory_keys(const Config& c) {
  // In the order trajectory_differences lists them: the keys every resolved config has, then
  // the optional ones, then the run's length.
  std::vector<std::string> keys;
  append_resume_keys(keys, model_section(), Resume::Trajectory, false);
  append_resume_keys(keys, data_section(), Resume::Trajectory, false);
  append_resume_keys(keys, optim_section(), Resume::Trajectory, false);
  append_resume_keys(keys, train_section(), Resume::Trajectory, false);
  append_resume_keys(keys, optim_section(), Resume::Trajectory, true);
  append_resume_keys(keys, model_section(), Resume::Trajectory, true);
  // The run's length shapes the lr schedule unless it is constant without a warmup fraction.
  if (c.optim.schedule != LrSchedule::Constant || c.optim.warmup_frac > 0)
    append_resume_keys(keys, train_section(), Resume::RunLength, false);
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
