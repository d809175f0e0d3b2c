// The rows of the config sections (model.moe's are in moe_config.cpp). The checks here bound one
// key; checks that span keys follow the read in config.cpp.
#include "core/config_table.h"

#include <charconv>
#include <cmath>
#include <thread>

#include "base/error.h"
#include "base/treatment.h"

namespace eco::config_table {

using namespace config_reader;
using L = ConfigLimits;

namespace {

// The logical cores of this machine (at least 1), for the bound on train.threads.
int64_t machine_cores() { return std::max<int64_t>(1, std::thread::hardware_concurrency()); }

// The attention keys are written for gemma3, and for the other families only where set away
// from plain multi-head causal attention. n_kv_head, head_dim and query_pre_attn_scalar are
// written as the values they resolve to.
bool gemma3(const ModelConfig& m) { return m.family == ModelFamily::Gemma3; }
bool shows_window(const ModelConfig& m) { return gemma3(m) || m.sliding_window > 0; }

// model.moe, a section of its own (moe_section), written when the model has experts; its shape
// keys enter the fingerprint as one group (model_fingerprint).
Key<ModelConfig> moe_key() {
  Key<ModelConfig> k;
  k.name = "moe";
  k.read = [](SectionReader& r, ModelConfig& m, const std::string& origin) {
    read_moe_config(r, m, origin);
  };
  k.written_when = [](const ModelConfig& m) { return m.moe.enabled(); };
  k.write = [](YAML::Emitter& e, const ModelConfig& m) { write_section(e, moe_section(), m.moe); };
  return k;
}

// precision.treatment, read as its name (base/treatment.h's); the default is the struct's.
Key<PrecisionConfig> treatment_key() {
  Key<PrecisionConfig> k;
  k.name = "treatment";
  k.read = [](SectionReader& r, PrecisionConfig& p, const std::string& origin) {
    std::string name = p.treatment.name;
    r.get("treatment", name);
    try {
      p.treatment = treatment_from_name(name);
    } catch (const Error& e) {
      usage_error("{}: key 'precision.treatment': {}", origin, e.what());
    }
  };
  k.write = [](YAML::Emitter& e, const PrecisionConfig& p) { e << p.treatment.name; };
  k.text = [](const PrecisionConfig& p) { return p.treatment.name; };
  k.resume = Resume::Shape;
  return k;
}

// train.threads: a count, or "auto".
Key<TrainConfig> threads_key() {
  using T = TrainConfig;
  Key<T> k;
  k.name = "threads";
  k.read = [](SectionReader& r, T& t, const std::string& origin) {
    if (!r.has("threads")) return r.get("threads", t.threads);  // consumed; the default stays
    std::string text = t.threads == T::kThreadsAuto ? "auto" : std::to_string(t.threads);
    r.get("threads", text);
    if (text == "auto") {
      t.threads = T::kThreadsAuto;
      return;
    }
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 0 ||
        n > L::kThreadsPerCore * machine_cores())
      usage_error("{}: key 'train.threads': expected a number of threads in [0, {}] (0 = all "
                  "cores; at most 4 x this machine's cores) or 'auto' (the cores other processes "
                  "leave free), got '{}'",
                  origin, L::kThreadsPerCore * machine_cores(), clip_for_message(text));
    t.threads = int(n);
  };
  k.write = [](YAML::Emitter& e, const T& t) {
    if (t.threads == T::kThreadsAuto) e << "auto";
    else e << t.threads;
  };
  k.text = [](const T& t) {
    return t.threads == T::kThreadsAuto ? std::string("auto") : std::to_string(t.threads);
  };
  return k;
}

}  // namespace

const Section<ModelConfig>& model_section() {
  using M = ModelConfig;
  static const Section<M> section{
      "model",
      {
          key("family", &M::family, kFamilyNames)
              .then([](M& m) { m.set_family(m.family); })
              .shape(),
          key("n_layer", &M::n_layer).range(1, L::kMaxLayers).shape(),
          key("n_head", &M::n_head).range(1, L::kMaxHeads).shape(),
          key("d_model", &M::d_model).range(1, L::kMaxDModel).shape(),
          key("mlp_hidden", &M::mlp_hidden)
              .range(0, L::kMaxMlpHidden, " (0 = family default)")
              .shape(),
          key("vocab_size", &M::vocab_size).range(2, L::kMaxVocab).shape(),
          key("seq_len", &M::seq_len).range(1, L::kMaxSeqLen).trajectory(),
          key("max_seq_len", &M::max_seq_len).range(0, L::kMaxSeqLen, " (0 = seq_len)").shape(),
          key("tie_embeddings", &M::tie_embeddings).by_family(true, false, true).shape(),
          // Gemma 3's defaults (HF Gemma3TextConfig): global base 1e6, local 1e4, window 512.
          key("rope_theta", &M::rope_theta)
              .by_family(1e4f, 1e4f, 1e6f)
              .range(1, 1e12)
              .trajectory(),
          key("norm_eps", &M::norm_eps)
              .by_family(1e-5f, 1e-5f, 1e-6f)
              .must([](const float& v) { return v > 0 && v <= 1; },
                    "must be a finite number in (0, 1]")
              .trajectory(),
          // Its bounds depend on n_head: a cross-key check.
          key("n_kv_head", &M::n_kv_head)
              .when([](const M& m) { return gemma3(m) || m.kv_heads() != m.n_head; })
              .shown_as([](const M& m) { return fmt::format("{}", m.kv_heads()); })
              .shape(),
          key("head_dim", &M::head_dim_override)
              .range(0, L::kMaxDModel, " (0 = d_model / n_head)")
              .when([](const M& m) { return gemma3(m) || m.head_dim_override > 0; })
              .shown_as([](const M& m) { return fmt::format("{}", m.head_dim()); })
              .shape(),
          key("sliding_window", &M::sliding_window)
              .by_family(0, 0, 512)
              .range(0, L::kMaxSeqLen, " (0 = no window)")
              .when(shows_window)
              .shape(),
          key("sliding_window_pattern", &M::sliding_window_pattern)
              .range(1, L::kMaxLayers)
              .when(shows_window)
              .shape(),
          key("rope_local_theta", &M::rope_local_theta)
              .range(1, 1e12)
              .when(shows_window)
              .shown_as([](const M& m) { return fmt::format("{}", m.rope_local_theta); })
              .trajectory(),
          key("query_pre_attn_scalar", &M::query_pre_attn_scalar)
              .must(
                  [](const float& v) {
                    return v == 0 || (std::isfinite(v) && v > 0 && v <= 1e9);
                  },
                  "must be 0 (head_dim) or a finite number in (0, 1e9]")
              .when([](const M& m) { return gemma3(m) || m.query_pre_attn_scalar > 0; })
              .shown_as([](const M& m) { return fmt::format("{}", m.query_scalar()); })
              .shape(),
          moe_key(),
          key("init_from", &M::init_from).when([](const M& m) { return !m.init_from.empty(); }),
      }};
  return section;
}

const Section<DataConfig>& data_section() {
  using D = DataConfig;
  static const Section<D> section{"data",
                                  {
                                      key("source", &D::source, kDataSourceNames).trajectory(),
                                      key("train", &D::train),
                                      key("val", &D::val),
                                      key("decode_table", &D::decode_table),
                                      key("shuffle", &D::shuffle).trajectory(),
                                  }};
  return section;
}

const Section<OptimConfig>& optim_section() {
  using O = OptimConfig;
  const auto unit_open = [](const double& v) { return v >= 0 && v < 1; };  // [0, 1)
  static const Section<O> section{
      "optim",
      {
          key("name", &O::name, kOptimizerNames).shape("optimizer"),
          key("lr", &O::lr)
              .must([](const double& v) { return v > 0 && v <= 10; },
                    "must be a finite number in (0, 10]")
              .trajectory(),
          key("beta1", &O::beta1).must(unit_open, "must be in [0, 1)").trajectory(),
          key("beta2", &O::beta2).must(unit_open, "must be in [0, 1)").trajectory(),
          key("eps", &O::eps)
              .must([](const double& v) { return v > 0 && v <= 1; },
                    "must be a finite number in (0, 1]")
              .trajectory(),
          key("weight_decay", &O::weight_decay).range(0, 10).trajectory(),
          key("grad_clip", &O::grad_clip).range(0, 1e30, " (0 disables clipping)").trajectory(),
          key("warmup_steps", &O::warmup_steps).range(0, L::kMaxSteps).trajectory(),
          key("warmup_frac", &O::warmup_frac).must(unit_open, "must be in [0, 1)").trajectory(),
          key("schedule", &O::schedule, kScheduleNames).trajectory(),
          key("final_lr_frac", &O::final_lr_frac).range(0, 1).trajectory(),
          // Its bounds depend on lr: a cross-key check.
          key("warmup_start_lr", &O::warmup_start_lr)
              .when([](const O& o) { return o.warmup_start_lr > 0; })
              .trajectory(),
          key("state_dtype", &O::state_dtype, kStateDTypeNames).shape(),
      }};
  return section;
}

const Section<TrainConfig>& train_section() {
  using T = TrainConfig;
  const auto at_least = [](int lo) { return [lo](const int& v) { return v >= lo; }; };
  static const Section<T> section{
      "train",
      {
          key("batch_size", &T::batch_size).range(1, L::kMaxBatch).trajectory(),
          // The micro-batches of a step (dp x ep x grad_accum) are compared as one number.
          key("grad_accum", &T::grad_accum).range(1, L::kMaxGradAccum),
          key("max_steps", &T::max_steps).range(0, L::kMaxSteps).run_length(),
          key("max_tokens", &T::max_tokens).range(0, L::kMaxTokens).run_length(),
          key("log_interval", &T::log_interval).must(at_least(1), "must be >= 1"),
          key("eval_interval", &T::eval_interval).must(at_least(0), "must be >= 0 (0 = no eval)"),
          key("eval_batches", &T::eval_batches).range(1, L::kMaxEvalBatches),
          key("checkpoint_interval", &T::checkpoint_interval).must(at_least(0), "must be >= 0"),
          key("keep_checkpoints", &T::keep_checkpoints).range(1, L::kMaxKeepCheckpoints),
          key("sample_interval", &T::sample_interval).must(at_least(0), "must be >= 0"),
          key("sample_tokens", &T::sample_tokens).range(0, L::kMaxSampleTokens),
          key("sample_temperature", &T::sample_temperature).range(1e-3, 100),
          key("seed", &T::seed).trajectory(),
          key("out_dir", &T::out_dir).check([](const T& t) {
            return t.out_dir.empty() ? "must not be empty" : "";
          }),
          threads_key(),
          key("profile", &T::profile),
          key("spike_factor", &T::spike_factor)
              .must([](const double& v) { return v == 0 || (v > 1 && v <= 1e6); },
                    "must be 0 (off) or a finite number in (1, 1e6]")
              .when([](const T& t) { return t.spike_factor != T{}.spike_factor; }),
          key("spike_window", &T::spike_window)
              .range(1, L::kMaxSpikeWindow)
              .when([](const T& t) { return t.spike_window != T{}.spike_window; }),
      }};
  return section;
}

const Section<PrecisionConfig>& precision_section() {
  using P = PrecisionConfig;
  static const Section<P> section{
      "precision",
      {
          treatment_key(),
          key("quantize", &P::quantize, kQuantizeScopeNames)
              .when([](const P& p) { return p.quantize != QuantizeScope::Blocks; })
              .shape(),
      }};
  return section;
}

// Written only for a run of several processes or ZeRO (to_yaml).
const Section<ParallelConfig>& parallel_section() {
  using P = ParallelConfig;
  static const Section<P> section{
      "parallel",
      {
          key("dp", &P::dp).range(1, L::kMaxRanks),
          key("ep", &P::ep).range(1, L::kMaxRanks),
          key("zero", &P::zero).must([](const int& v) { return v == 0 || v == 1; },
                                     "must be 0 or 1"),
          key("timeout_s", &P::timeout_s)
              .must([](const double& v) { return std::isfinite(v) && v >= 0 && v <= 1e7; },
                    "must be 0 (wait forever) or seconds in (0, 1e7]"),
          key("phase_timeout_s", &P::phase_timeout_s)
              .must([](const double& v) { return std::isfinite(v) && v >= 0 && v <= 1e7; },
                    "must be 0 (wait forever) or seconds in (0, 1e7]")
              .when([](const P& p) { return p.phase_timeout_s != ParallelConfig{}.phase_timeout_s; }),
          // Its bounds depend on ep: a cross-key check.
          key("ep_row_factor", &P::ep_row_factor).when([](const P& p) {
            return p.ep_row_factor > 0;
          }),
          key("overlap", &P::overlap).when([](const P& p) { return p.overlap; }),
      }};
  return section;
}

}  // namespace eco::config_table
