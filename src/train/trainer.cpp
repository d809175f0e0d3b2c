// The training loop and the run directory it writes.
#include "train/trainer.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cuda/workspace_plan.h"
#include "train/checkpoint.h"
#include "train/metrics.h"

namespace eco {
namespace fs = std::filesystem;
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
void on_signal(int) { g_stop_requested = 1; }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// The per-operation breakdown of the profiled steps (train.profile): a table in the log, and the
// same figures for summary.json. "other" is the step's wall time not covered by device work of
// backend operations: host work, synchronisation and launch gaps.
nlohmann::json profile_report(const std::map<std::string, std::pair<int64_t, double>>& ops,
                              int64_t steps, double wall_ms) {
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(ops.begin(), ops.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  const double step_ms = wall_ms / double(steps);
  double covered = 0;
  std::string table = fmt::format("per-operation time over {} steps ({:.2f} ms/step):\n", steps,
                                  step_ms);
  table += fmt::format("  {:<32} {:>10} {:>10} {:>7}\n", "operation", "calls/step", "ms/step",
                       "share");
  nlohmann::json by_op = nlohmann::json::object();
  for (const auto& [name, cm] : rows) {
    const double ms = cm.second / double(steps);
    covered += ms;
    table += fmt::format("  {:<32} {:>10.1f} {:>10.3f} {:>6.1f}%\n", name,
                         double(cm.first) / double(steps), ms, 100.0 * ms / step_ms);
    by_op[name] = {{"calls_per_step", double(cm.first) / double(steps)}, {"ms_per_step", ms}};
  }
  const double other = std::max(0.0, step_ms - covered);
  table += fmt::format("  {:<32} {:>10} {:>10.3f} {:>6.1f}%", "other (host, sync, gaps)", "",
                       other, 100.0 * other / step_ms);
  spdlog::info("{}", table);
  return {{"steps", steps}, {"ms_per_step", step_ms}, {"other_ms_per_step", other},
          {"operations", by_op}};
}

nlohmann::json memory_json(const MemoryLedger& ledger, int64_t params, int64_t quantizable) {
  nlohmann::json mem;
  for (size_t i = 0; i < size_t(MemCategory::Count); ++i)
    mem[mem_category_name(MemCategory(i))] = ledger.total(MemCategory(i));
  mem["total"] = ledger.total();
  mem["static"] = ledger.static_bytes();
  mem["static_bytes_per_param"] = double(ledger.static_bytes()) / double(params);
  mem["quantizable_params"] = quantizable;
  mem["static_quantizable"] = ledger.static_bytes_quantizable();
  mem["static_bytes_per_quantized_param"] =
      quantizable ? double(ledger.static_bytes_quantizable()) / double(quantizable) : 0.0;
  return mem;
}

}  // namespace

Trainer::Trainer(const Config& cfg) : cfg_(cfg) {
  if (cfg_.train.threads > 0) omp_set_num_threads(cfg_.train.threads);
  backend_ = make_backend(cfg_.device);
  model_ = std::make_unique<Transformer>(cfg_.model, *backend_, cfg_.train.batch_size,
                                         cfg_.precision.treatment, cfg_.precision.quantize);
  opt_ = std::make_unique<Optimizer>(cfg_.optim, *model_, cfg_.train.seed);

  LoaderOptions lo{cfg_.train.batch_size, cfg_.model.seq_len, cfg_.model.vocab_size,
                   cfg_.train.seed, cfg_.data.shuffle};
  LoaderOptions vo = lo;
  vo.shuffle = false;
  if (cfg_.data.source == DataSource::Synthetic) {
    train_data_.emplace(DataLoader::synthetic(0, lo));
    val_data_.emplace(DataLoader::synthetic(1, vo));
  } else {
    train_data_.emplace(DataLoader::from_shards(cfg_.data.train, lo));
    if (!cfg_.data.val.empty()) val_data_.emplace(DataLoader::from_shards(cfg_.data.val, vo));
    std::string table = cfg_.data.decode_table;
    if (table.empty()) {
      const auto first = expand_shard_pattern(cfg_.data.train).front();
      const auto candidate = fs::path(first).parent_path() / "decode_table.bin";
      if (fs::exists(candidate)) table = candidate.string();
    }
    if (!table.empty()) {
      decode_table_.emplace(DecodeTable::load(table));
      if (decode_table_->vocab_size() > cfg_.model.vocab_size)
        usage_error("{}: decode table {} has {} tokens but model.vocab_size is {}",
                    cfg_.source_path, table, decode_table_->vocab_size(), cfg_.model.vocab_size);
    }
  }
}

Trainer::~Trainer() = default;

std::string Trainer::decode(const int32_t* tokens, size_t n) const {
  if (cfg_.data.source == DataSource::Synthetic) return SyntheticCorpus::render(tokens, n);
  if (decode_table_) return decode_table_->decode(tokens, n);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? " " : "", tokens[i]);
  return s;
}

double Trainer::evaluate() {
  if (!val_data_) return std::nan("");
  const int B = cfg_.train.batch_size, T = cfg_.model.seq_len;
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  // Never more batches than the split holds (windows are reused otherwise).
  const int64_t available = std::max<int64_t>(1, val_data_->windows_per_epoch() / B);
  const int64_t n = std::min<int64_t>(cfg_.train.eval_batches, available);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    val_data_->batch(i, in.data(), tgt.data());
    sum += model_->forward_loss(in.data(), tgt.data(), B, T);
  }
  return sum / double(n);
}

std::string Trainer::sample(int n_tokens, uint64_t seed) {
  const int T = cfg_.model.seq_len, V = cfg_.model.vocab_size;
  Rng rng(seed);
  // Prompt: the first token of the first validation (or training) window.
  std::vector<int32_t> in(size_t(cfg_.train.batch_size) * T), tgt(in.size());
  (val_data_ ? *val_data_ : *train_data_).batch(0, in.data(), tgt.data());
  std::vector<int32_t> seq = {in[0]};
  const float inv_temp = float(1.0 / cfg_.train.sample_temperature);
  for (int i = 0; i < n_tokens; ++i) {
    const int ctx = std::min<int>(int(seq.size()), T);
    const int32_t* window = seq.data() + seq.size() - ctx;
    const Tensor& lg = model_->forward_logits(window, 1, ctx);
    std::vector<float> logits =
        to_host_floats(*backend_, lg.slice(int64_t(ctx - 1) * model_->logits_stride(), {V}));
    const float mx = *std::max_element(logits.begin(), logits.end());
    double total = 0;
    for (auto& l : logits) total += (l = std::exp((l - mx) * inv_temp));
    double r = rng.uniform() * total;
    int32_t next = V - 1;
    for (int v = 0; v < V; ++v)
      if ((r -= logits[v]) <= 0) {
        next = v;
        break;
      }
    seq.push_back(next);
  }
  return decode(seq.data(), seq.size());
}

void Trainer::save(int64_t step) {
  CheckpointState st;
  st.step = step;
  st.tokens = step * cfg_.tokens_per_step();
  st.fingerprint = model_fingerprint(cfg_);
  st.config_yaml = to_yaml(cfg_);
  for (const auto& [name, t] : state()) {
    std::vector<char> blob(t.bytes());
    backend_->copy_to_host(blob.data(), t);
    st.sections.emplace_back(name, std::move(blob));
  }
  const std::string path = (fs::path(cfg_.train.out_dir) / checkpoint_name(step)).string();
  save_checkpoint(path, st);
  prune_checkpoints(cfg_.train.out_dir, cfg_.train.keep_checkpoints);
  spdlog::info("checkpoint {} written", path);
}

std::vector<std::pair<std::string, Tensor>> Trainer::state() const {
  auto all = model_->store().state();
  for (auto& e : opt_->state()) all.push_back(std::move(e));
  return all;
}

int64_t Trainer::restore(const std::string& path) {
  const CheckpointState st = load_checkpoint(path);
  const std::string want = model_fingerprint(cfg_);
  if (st.fingerprint != want)
    usage_error("{}: checkpoint was written by an incompatible config (checkpoint: {}; this config: {})",
                path, st.fingerprint, want);
  const auto tensors = state();
  if (st.sections.size() != tensors.size())
    runtime_error("{}: checkpoint has {} tensors, this run has {}", path, st.sections.size(),
                  tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto& blob = st.section(name, path);
    if (blob.size() != t.bytes())
      runtime_error("{}: section '{}' has {} bytes, expected {}", path, name, blob.size(),
                    t.bytes());
    backend_->copy_from_host(t, blob.data());
  }
  opt_->set_steps_taken(st.step);
  if (st.step > cfg_.total_steps())
    usage_error("{}: checkpoint is at step {}, beyond this run's {} steps", path, st.step,
                cfg_.total_steps());
  return st.step;
}

int Trainer::run(const RunOptions& opts) {
  const auto& tc = cfg_.train;
  std::error_code ec;
  fs::create_directories(tc.out_dir, ec);
  if (ec || !fs::is_directory(tc.out_dir))
    usage_error("train.out_dir '{}': cannot create directory ({})", tc.out_dir, ec.message());
  {
    const std::string probe = (fs::path(tc.out_dir) / ".write_test").string();
    std::FILE* f = std::fopen(probe.c_str(), "w");
    if (!f) usage_error("train.out_dir '{}': directory is not writable", tc.out_dir);
    std::fclose(f);
    fs::remove(probe, ec);
  }

  int64_t start = 0;
  if (opts.resume) {
    const std::string path = opts.resume_path.empty() ? latest_checkpoint(tc.out_dir) : opts.resume_path;
    if (path.empty()) {
      spdlog::warn("--resume: no checkpoint in {}, starting from scratch", tc.out_dir);
      model_->init_weights(tc.seed);
    } else {
      start = restore(path);
      spdlog::info("resumed from {} at step {}", path, start);
    }
  } else {
    model_->init_weights(tc.seed);
  }
  write_text_file((fs::path(tc.out_dir) / "config.resolved.yaml").string(), to_yaml(cfg_));
  MetricsLog metrics(tc.out_dir, opts.resume, start);

  const int64_t total = cfg_.total_steps(), warmup = cfg_.warmup_steps();
  const int B = tc.batch_size, T = cfg_.model.seq_len;
  const int64_t tok_per_step = cfg_.tokens_per_step();
  const auto floor = train_data_->entropy_floor_nats();
  spdlog::info("model: {} family, {} layers, d_model {}, {} heads, {} parameters; backend {}",
               cfg_.model.family, cfg_.model.n_layer, cfg_.model.d_model, cfg_.model.n_head,
               model_->table().total, backend_->name());
  spdlog::info("data: {}", train_data_->describe());
  if (floor) spdlog::info("synthetic corpus entropy floor: {:.4f} nats/token", *floor);
  spdlog::info("training {} steps of {} tokens ({} x {} x {} accum), {} threads", total,
               tok_per_step, B, T, tc.grad_accum, omp_get_max_threads());

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  using clock = std::chrono::steady_clock;
  const auto run_start = clock::now();
  double train_loss = std::nan(""), val_loss = std::nan(""), recent_ms = 0;
  int64_t timed_steps = 0, step = start;
  bool diverged = false;
  std::string last_sample;

  // train.profile: the per-operation breakdown of the steps after the first kProfileSkip (which
  // pick GEMM algorithms and grow scratch buffers). Each profiled step starts by discarding what
  // ran since the last one (eval, samples, checkpoints) and ends by collecting its own operations.
  constexpr int64_t kProfileSkip = 5;
  const bool profile = tc.profile && backend_->supports_profiling();
  if (tc.profile && !profile)
    spdlog::warn("train.profile: the {} backend has no per-operation timing; ignored",
                 backend_->name());
  if (profile && total - start <= kProfileSkip)
    spdlog::warn("train.profile: only {} steps to run; the first {} are not profiled",
                 total - start, kProfileSkip);
  std::map<std::string, std::pair<int64_t, double>> prof_ops;  // name -> calls, ms
  int64_t prof_steps = 0;
  double prof_wall_ms = 0;

  for (; step < total; ++step) {
    const bool profiled = profile && step >= start + kProfileSkip;
    if (profiled) {
      if (step == start + kProfileSkip) backend_->set_profiling(true);
      backend_->take_profile();
    }
    const auto t0 = clock::now();
    const double lr = lr_at(cfg_.optim, step, warmup, total);
    model_->zero_grad();
    double loss_sum = 0;
    for (int micro = 0; micro < tc.grad_accum; ++micro) {
      {
        const ScopedRange range(*backend_, "data");
        train_data_->batch(step * tc.grad_accum + micro, in.data(), tgt.data());
      }
      const ScopedRange range(*backend_, "forward + backward");
      loss_sum += model_->forward_backward(in.data(), tgt.data(), B, T, 1.0f / tc.grad_accum);
    }
    train_loss = loss_sum / tc.grad_accum;
    const double gnorm = opt_->grad_norm();
    if (!std::isfinite(train_loss) || !std::isfinite(gnorm)) {
      spdlog::error("training diverged at step {}: loss {}, grad norm {}", step + 1, train_loss,
                    gnorm);
      diverged = true;
      break;
    }
    {
      const ScopedRange range(*backend_, "optimizer step");
      opt_->step(lr, gnorm);
    }
    if (profiled) {
      for (const auto& op : backend_->take_profile()) {
        auto& [calls, op_ms] = prof_ops[op.name];
        calls += op.calls;
        op_ms += op.ms;
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (profiled) ++prof_steps, prof_wall_ms += ms;
    // Exponential average of step time (the first steps are warm-up and excluded).
    if (step > start) recent_ms = timed_steps++ == 0 ? ms : 0.9 * recent_ms + 0.1 * ms;
    const int64_t done = step + 1;
    const bool last = done == total;
    if (done % tc.log_interval == 0 || step == start || last) {
      const double ms_est = timed_steps ? recent_ms : ms;
      const double tps = tok_per_step / (ms / 1000.0);
      spdlog::info("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.1f} ms/step | "
                   "{:.0f} tok/s | ETA {}",
                   done, total, train_loss, lr, gnorm, ms, tps,
                   format_duration(ms_est * double(total - done) / 1000.0));
      metrics.write({{"step", done},
                     {"tokens", done * tok_per_step},
                     {"train_loss", train_loss},
                     {"lr", lr},
                     {"grad_norm", gnorm},
                     {"ms_per_step", ms},
                     {"tokens_per_s", tps}});
    }
    if ((tc.eval_interval > 0 && done % tc.eval_interval == 0) || last) {
      val_loss = evaluate();
      if (std::isfinite(val_loss)) {
        spdlog::info("step {:>6}/{} | val loss {:.4f}", done, total, val_loss);
        metrics.write({{"step", done}, {"tokens", done * tok_per_step}, {"val_loss", val_loss}});
      }
    }
    if (tc.sample_interval > 0 && done % tc.sample_interval == 0 && !last && tc.sample_tokens > 0) {
      last_sample = sample(tc.sample_tokens, tc.seed ^ uint64_t(done));
      spdlog::info("sample at step {}:\n{}", done, last_sample);
    }
    if ((tc.checkpoint_interval > 0 && done % tc.checkpoint_interval == 0) || last) save(done);
    if (g_stop_requested) {
      spdlog::warn("interrupted: saving a checkpoint at step {} (resume with --resume)", done);
      if (!last) save(done);
      ++step;
      break;
    }
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);

  const double wall = std::chrono::duration<double>(clock::now() - run_start).count();
  if (!diverged && step == total && tc.sample_tokens > 0) {
    last_sample = sample(tc.sample_tokens, tc.seed ^ uint64_t(total));
    spdlog::info("sample:\n{}", last_sample);
    std::FILE* f = std::fopen((fs::path(tc.out_dir) / "samples.txt").c_str(), "a");
    if (f) {
      std::fprintf(f, "=== step %lld ===\n%s\n", (long long)total, last_sample.c_str());
      std::fclose(f);
    }
  }
  const int64_t steps_run = step - start;
  nlohmann::json summary = {
      {"final_train_loss", train_loss},
      {"final_val_loss", std::isfinite(val_loss) ? nlohmann::json(val_loss) : nlohmann::json()},
      {"steps", step},
      {"tokens", step * tok_per_step},
      {"wall_s", wall},
      {"tokens_per_s", steps_run > 0 ? double(steps_run * tok_per_step) / wall : 0.0},
      {"params", model_->table().total},
      {"diverged", diverged},
      {"treatment", cfg_.precision.treatment},
      {"memory", memory_json(backend_->ledger(), model_->table().total,
                             model_->table().count_quantizable())}};
  if (floor) summary["entropy_floor"] = *floor;
  if (prof_steps > 0) {
    summary["profile"] = profile_report(prof_ops, prof_steps, prof_wall_ms);
    backend_->set_profiling(false);
  }
  write_json_file((fs::path(tc.out_dir) / "summary.json").string(), summary);
  if (floor && std::isfinite(val_loss))
    spdlog::info("final val loss {:.4f} vs entropy floor {:.4f} ({:+.1f}%)", val_loss, *floor,
                 100.0 * (val_loss / *floor - 1.0));
  if (diverged) return 1;
  if (g_stop_requested) return 130;
  return 0;
}

std::string plan_report(const Config& cfg) {
  auto be = make_planning_backend(cfg.device);
  Transformer model(cfg.model, *be, cfg.train.batch_size,
                    cfg.precision.treatment, cfg.precision.quantize);
  Optimizer opt(cfg.optim, model);
  const auto& ledger = be->ledger();
  const int64_t q = model.table().count_quantizable();
  std::string s = model.table().describe() + "\n" + ledger.table();
  s += fmt::format("treatment {}, optimizer {} with {} state\n", cfg.precision.treatment,
                   cfg.optim.name, cfg.optim.state_dtype);
  s += fmt::format("quantize {} ({})\n", cfg.precision.quantize,
                   cfg.precision.quantize == QuantizeScope::Blocks
                       ? "the treatment applies to every block linear"
                       : "the treatment applies to the experts' weights only");
  s += fmt::format("static bytes per parameter: {:.2f}\n",
                   double(ledger.static_bytes()) / double(model.table().total));
  if (q > 0)
    s += fmt::format("static bytes per quantized parameter: {:.3f}  ({} quantized parameters)\n",
                     double(ledger.static_bytes_quantizable()) / double(q), q);
  // What the CUDA plan (an sm_90 plan) cannot know: the GPU found at run time.
  const cuda_ws::Reservation r = cuda_ws::reservation(model.workspace_shapes());
  if (cfg.device == Device::Cuda && r.fp8_accumulator_sm89)
    s += fmt::format(
        "on sm_89 GPUs the FP8 forward also reserves an fp32 accumulator of {:.1f} MiB "
        "(workspace, not in the table above)\n",
        double(r.fp8_accumulator_sm89) / double(1 << 20));
  return s;
}

}  // namespace eco
