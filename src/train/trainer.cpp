// The training loop: each step's lr, micro-batches, clipping and update, and what falls due after
// it. Evaluation, sampling, checkpoint contents, the run directory, the log, the stop signal and
// train.profile each live in their own file beside this one.
#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/config_reader.h"
#include "core/cpu_share.h"
#include "base/error.h"
#include "core/test_faults.h"
#include "hf/hf_import.h"
#include "train/evaluator.h"
#include "train/memory_check.h"
#include "train/run_factory.h"
#include "train/run_summary.h"
#include "train/signals.h"
#include "train/step_profile.h"
#include "train/training_state.h"

namespace eco {

Trainer::Trainer(const Config& cfg, RunContext ctx, Communicator* comm)
    : cfg_(cfg),
      ctx_(ctx),
      own_comm_(comm ? nullptr : make_local_communicator()),
      comm_(comm ? comm : own_comm_.get()),
      log_(ctx),
      run_dir_(cfg.train.out_dir, ctx),
      spikes_(cfg.train.spike_factor, cfg.train.spike_window) {
  if (ctx_.world < 1 || ctx_.rank < 0 || ctx_.rank >= ctx_.world)
    runtime_error("run context: rank {} is not a rank of a run of {}", ctx_.rank, ctx_.world);
  const ParallelConfig& par = cfg_.parallel;
  if (const int w = comm_->world(); w != par.world()) {
    // A change of one key that makes dp x ep the world, where there is one.
    const std::string fix = w % par.ep == 0   ? fmt::format("set parallel.dp: {}", w / par.ep)
                            : w % par.dp == 0 ? fmt::format("set parallel.ep: {}", w / par.dp)
                                              : fmt::format("make parallel.dp x parallel.ep {}", w);
    usage_error("{}: parallel.dp {} x parallel.ep {} = {} rank{}, but the world has {} (launch "
                "{}: mpirun -np {}, or {})",
                cfg_.source_path, par.dp, par.ep, par.world(), par.world() == 1 ? "" : "s", w,
                par.world(), par.world(), fix);
  }
  if (cfg_.train.threads == TrainConfig::kThreadsAuto) {
    std::string why;
    omp_set_num_threads(measure_auto_threads(local_ranks(), 0.2, &why));
    log_.info("threads: auto: {}", why);
  } else if (cfg_.train.threads > 0) {
    omp_set_num_threads(cfg_.train.threads);
  }
  // Before any allocation: a model that cannot fit is refused at once, not after minutes of
  // zeroing memory.
  require_device_runs_model(cfg_);
  require_memory_fits(cfg_);
  backend_ = make_backend(cfg_.device);
  plan_ = std::make_unique<ParallelPlan>(cfg_, *comm_, *backend_);
  for (const std::string& note : plan_->transport_notes()) log_.info("{}", note);
  RunParts run = build_run(cfg_, *backend_, RunShare{comm_->rank()}, plan_.get());
  model_ = std::move(run.model);
  opt_ = std::move(run.opt);
  grad_acc_ = run.grad_acc;

  LoaderOptions lo{cfg_.train.batch_size, cfg_.model.seq_len, cfg_.model.vocab_size,
                   cfg_.train.seed, cfg_.data.shuffle};
  LoaderOptions vo = lo;  // every rank evaluates the whole validation set
  vo.shuffle = false;
  lo.rank = comm_->rank();  // every rank of a step (dp x ep) reads its own windows
  lo.world_size = par.world();
  if (cfg_.data.source == DataSource::Synthetic) {
    train_data_.emplace(DataLoader::synthetic(0, lo));
    val_data_.emplace(DataLoader::synthetic(1, vo));
  } else {
    train_data_.emplace(DataLoader::from_shards(cfg_.data.train, lo));
    if (!cfg_.data.val.empty()) val_data_.emplace(DataLoader::from_shards(cfg_.data.val, vo));
  }
  sampler_.emplace(cfg_);
  const size_t batch_tokens = size_t(cfg_.train.batch_size) * cfg_.model.seq_len;
  inputs_.resize(batch_tokens);
  targets_.resize(batch_tokens);
}

Trainer::~Trainer() = default;

double Trainer::evaluate() {
  if (!val_data_) return std::nan("");
  const Communicator::PhaseGuard phase(*comm_, RunPhase::Eval);
  return mean_val_loss(*model_, *val_data_, cfg_.train.batch_size, cfg_.model.seq_len,
                       cfg_.train.eval_batches, /*stop_early=*/cfg_.parallel.ep == 1);
}

std::string Trainer::sample(int n_tokens, uint64_t seed) {
  const Communicator::PhaseGuard phase(*comm_, RunPhase::Sample);
  // Prompt: the first token of the first validation (or training) window.
  std::vector<int32_t> in(inputs_.size()), tgt(in.size());
  (val_data_ ? *val_data_ : *train_data_).batch(0, in.data(), tgt.data());
  return sampler_->sample(*model_, *backend_, in[0], n_tokens, seed,
                          /*stop_early=*/cfg_.parallel.ep == 1);
}

void Trainer::save(int64_t step, Progress& p) {
  // Only the writing rank (0) copies the state off the device; under ZeRO-1 every rank sends it
  // its rows of the moments. Rank 0's verdict on the state (finite or not) reaches every rank.
  // The others wait for it under parallel.phase_timeout_s.
  const Communicator::PhaseGuard phase(*comm_, RunPhase::Checkpoint);
  int32_t diverged = 0;
  if (run_dir_.writes() || opt_->sharded() || plan_->experts().enabled()) {
    const NamedTensors tensors = persistent_tensors(*model_, *opt_);
    CheckpointState st = capture_state(cfg_, step, *backend_, tensors,
                                       persistent_bounds(*model_, *opt_), plan_.get());
    if (run_dir_.writes()) {
      if (const std::string bad = first_non_finite(st, tensors); !bad.empty()) {
        p.divergence = fmt::format("training diverged by step {}: {}", step, bad);
        log_.error("{}; no checkpoint of it written{}", p.divergence,
                   p.saved >= 0 ? fmt::format(" (the last, of step {}, is kept)", p.saved) : "");
        diverged = 1;
      } else {
        st.loss_spikes = spikes_.state();
        slow_checkpoint_for_test();
        const std::string path = run_dir_.save_checkpoint(st, cfg_.train.keep_checkpoints);
        log_.info("checkpoint {} written", path);
      }
    }
  }
  plan_->broadcast_from_lead(&diverged, sizeof diverged);  // every rank alike
  if (diverged) {
    p.diverged = true;
    if (p.divergence.empty()) p.divergence = fmt::format("training diverged by step {}", step);
    return;
  }
  p.saved = step;
}

int64_t Trainer::restore(const CheckpointState& st, const std::string& path) {
  const int64_t step = restore_state(st, path, cfg_, *backend_, persistent_tensors(*model_, *opt_),
                                     persistent_bounds(*model_, *opt_), plan_->rank());
  opt_->set_steps_taken(step);
  spikes_.restore(st.loss_spikes);
  log_.info("resumed from {} at step {}", path, step);
  return step;
}

void Trainer::start_or_resume(const RunOptions& opts, Progress& p) {
  namespace fs = std::filesystem;
  const auto existing = run_dir_.checkpoints();
  const auto resume_at = [&](const CheckpointState& st, const std::string& path) {
    check_divergence_record(st.step, path, opts.resume_diverged);
    p.start = p.step = p.saved = restore(st, path);
    p.resumed = true;
    // As after each checkpoint: a run killed between a checkpoint's rename and the pruning left
    // one too many.
    for (const std::string& removed : run_dir_.prune_checkpoints(cfg_.train.keep_checkpoints))
      log_.info("removed {} (train.keep_checkpoints {})", removed, cfg_.train.keep_checkpoints);
  };
  if (!opts.resume_path.empty()) {
    const CheckpointState st = load_checkpoint(opts.resume_path);
    std::error_code ec;
    std::string same_file;  // the checkpoint to resume, should it live in out_dir
    for (const auto& [step, path] : existing) {
      if (fs::equivalent(path, opts.resume_path, ec)) {
        same_file = path;
      } else if (step > st.step && !opts.overwrite) {
        usage_error("train.out_dir '{}' holds {}, newer than {} (step {}), which would count as "
                    "this run's: --overwrite deletes the directory's checkpoints, or choose "
                    "another train.out_dir",
                    run_dir_.path(), path, opts.resume_path, st.step);
      }
    }
    if (opts.overwrite) run_dir_.remove_previous_run(same_file);
    resume_at(st, opts.resume_path);
    return;
  }
  if (!opts.resume && !opts.resume_if_present) {
    if (!existing.empty()) {
      if (!opts.overwrite)
        usage_error("train.out_dir '{}' holds checkpoints of an earlier run (newest: {}): "
                    "--resume continues it, --overwrite starts over and deletes them, or choose "
                    "another train.out_dir",
                    run_dir_.path(), existing.back().second);
      run_dir_.remove_previous_run("");
      log_.warn("--overwrite: deleted the earlier run's {} checkpoint(s), metrics, samples and "
                "summary in {}",
                existing.size(), run_dir_.path());
    }
    init_weights();
    return;
  }
  // The newest checkpoint that loads; newer damaged ones are set aside, named.
  for (auto it = existing.rbegin(); it != existing.rend(); ++it) {
    CheckpointState st;
    try {
      st = load_checkpoint(it->second);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Internal) throw;
      log_.warn("skipping {}: {}; set aside as {}", it->second, e.what(),
                run_dir_.set_aside(it->second));
      continue;
    }
    resume_at(st, it->second);
    return;
  }
  if (!existing.empty())
    runtime_error("--resume: no valid checkpoint in {} (each was damaged and set aside as "
                  "*.corrupt)",
                  run_dir_.path());
  if (!opts.resume_if_present)
    runtime_error("--resume: no checkpoint in {} (--resume-if-present starts from scratch when "
                  "there is none)",
                  run_dir_.path());
  log_.warn("--resume-if-present: no checkpoint in {}, starting from scratch", run_dir_.path());
  init_weights();
}

void Trainer::check_divergence_record(int64_t step, const std::string& path, bool allowed) {
  const nlohmann::json s = run_dir_.read_summary();
  if (!s.is_object() || !s.contains("diverged") || s["diverged"] != true) return;
  // A checkpoint past the summary's steps: an earlier --resume-diverged trained beyond them.
  if (s.contains("steps") && s["steps"].is_number_integer() && step > s["steps"].get<int64_t>())
    return;
  const std::string cause = s.contains("divergence") && s["divergence"].is_string()
                                ? s["divergence"].get<std::string>()
                                : std::string("\"diverged\": true");
  if (!allowed)
    runtime_error("--resume: the run in train.out_dir '{}' diverged ({}/summary.json: {}); "
                  "resuming from {} (step {}) would train into it again: --resume-diverged "
                  "resumes it anyway, a fresh start with --overwrite starts over",
                  run_dir_.path(), run_dir_.path(), cause, path, step);
  log_.warn("--resume-diverged: resuming a run that diverged ({}) from {} (step {})", cause, path,
            step);
}

void Trainer::init_weights() {
  if (cfg_.model.init_from.empty()) {
    model_->init_weights(cfg_.train.seed);
    return;
  }
  check_init_from(cfg_);
  // Every rank reads the directory (data parallelism: the same weights everywhere; expert
  // parallelism: each rank only its own experts, the others are absent from its store).
  import_hf(cfg_.model.init_from, cfg_.model, model_->store());
  log_.info("weights from the Hugging Face checkpoint {} (model.init_from), stored as {}",
            cfg_.model.init_from, cfg_.precision.treatment.name);
}

bool Trainer::finished_run_intact(Progress& p) {
  const nlohmann::json s = run_dir_.read_summary();
  const auto number = [&](const char* key) {
    return s.is_object() && s.contains(key) && s[key].is_number();
  };
  if (number("steps") && s["steps"] == p.step && number("final_train_loss") &&
      (number("final_val_loss") || !val_data_)) {
    log_.info("the run is complete (step {}); {}/summary.json is kept", p.step, run_dir_.path());
    return true;
  }
  // Killed between the final checkpoint and summary.json: the final step's losses were logged
  // before its checkpoint was written.
  p.train_loss = recorded_metric(run_dir_.path(), p.step, "train_loss");
  p.val_loss = recorded_metric(run_dir_.path(), p.step, "val_loss");
  p.moe = recorded_value(run_dir_.path(), p.step, "moe");
  if (!std::isfinite(p.val_loss)) p.val_loss = evaluate();
  return false;
}

void Trainer::log_run_header() {
  const auto& tc = cfg_.train;
  log_.info("model: {} family, {} layers, d_model {}, {} heads, {} parameters; backend {}",
            cfg_.model.family, cfg_.model.n_layer, cfg_.model.d_model, cfg_.model.n_head,
            model_->table().total, backend_->name());
  if (const MoeConfig& m = cfg_.model.moe; m.enabled())
    log_.info("moe: {} experts (hidden {}, {}) + {} shared, top-{}, router {}, {}; {} parameters "
              "active per token",
              m.n_experts, m.expert_hidden, m.expert_act, m.n_shared_experts, m.top_k, m.router,
              m.capacity_factor > 0 ? fmt::format("capacity factor {}", m.capacity_factor)
                                    : std::string("dropless"),
              model_->table().active);
  log_.info("data: {}", train_data_->describe());
  if (const auto floor = train_data_->entropy_floor_nats())
    log_.info("synthetic corpus entropy floor: {:.4f} nats/token", *floor);
  if (cfg_.parallel.world() > 1)
    log_.info("training {} steps of {} tokens ({} x {} x {} accum x {} ranks: dp {} x ep {}, "
              "communicator {}), {} threads per rank",
              cfg_.total_steps(), cfg_.tokens_per_step(), tc.batch_size, cfg_.model.seq_len,
              tc.grad_accum, cfg_.parallel.world(), cfg_.parallel.dp, cfg_.parallel.ep,
              comm_->name(), omp_get_max_threads());
  const ExpertParallel& ep = plan_->experts();
  if (ep.enabled()) {
    const int E = cfg_.model.moe.n_experts, L = E / ep.ep;
    log_.info("expert parallelism: ep {} x dp {}; this rank (group {}, rank {}) holds experts "
              "[{}, {}) of {} per MoE layer; expert gradients folded over the world in rank order",
              ep.ep, ep.dp, ep.group, ep.rank, ep.rank * L, (ep.rank + 1) * L, E);
  }
  else
    log_.info("training {} steps of {} tokens ({} x {} x {} accum), {} threads",
              cfg_.total_steps(), cfg_.tokens_per_step(), tc.batch_size, cfg_.model.seq_len,
              tc.grad_accum, omp_get_max_threads());
  if (plan_->world() > 1) log_.info("{}", plan_->overlap_line());
  if (opt_->sharded()) {
    const int64_t total = model_->table().total;
    log_.info("ZeRO-1: each rank updates and keeps the moments of its own rows (rank 0: {} of {} "
              "parameters, {:.1f}%){}; {} of {} parameters divided between ranks by rows{}, "
              "the rest whole",
              opt_->elements_here(), total, 100.0 * double(opt_->elements_here()) / double(total),
              ep.enabled() ? fmt::format(": the dense ones divided over the {} ranks, each "
                                         "rank's experts over the {} that hold them",
                                         plan_->world(), ep.dp)
                           : std::string(),
              opt_->split_params(), model_->table().specs.size(),
              ep.enabled() ? fmt::format(" ({} of them experts')", opt_->split_params(true))
                           : std::string());
  }
}

Trainer::StepResult Trainer::train_step(int64_t step) {
  const auto& tc = cfg_.train;
  const int B = tc.batch_size, T = cfg_.model.seq_len;
  StepResult r;
  r.lr = lr_at(cfg_.optim, step, cfg_.warmup_steps(), cfg_.total_steps());
  if (tc.grad_accum > 1) backend_->zero(grad_acc_);
  double loss_sum = 0;
  for (int micro = 0; micro < tc.grad_accum; ++micro) {
    if (micro > 0 && stop_requested() && plan_->world() == 1) {
      r.interrupted = true;
      return r;
    }
    {
      const ScopedRange range(*backend_, "data");
      train_data_->batch(step * tc.grad_accum + micro, inputs_.data(), targets_.data());
    }
    const ScopedRange range(*backend_, "forward + backward");
    model_->zero_grad();
    // parallel.overlap: the last micro-batch's gradients are summed over the ranks block by
    // block as the backward finishes them (on_grads_ready).
    const bool overlapped = plan_->overlaps() && micro == tc.grad_accum - 1;
    if (overlapped)
      model_->set_grad_ready([this](int64_t begin, int64_t end) { on_grads_ready(begin, end); });
    try {
      loss_sum += model_->forward_backward(inputs_.data(), targets_.data(), B, T,
                                           1.0f / float(tc.grad_accum * cfg_.parallel.world()));
      r.moe.add(model_->moe_summary());
    } catch (...) {
      model_->set_grad_ready({});
      throw;
    }
    if (overlapped) {
      model_->set_grad_ready({});
      plan_->wait_gradient_sums();
    } else if (tc.grad_accum > 1) {
      backend_->add_inplace(grad_acc_, model_->grads(), grad_acc_.numel());
    }
  }
  if (!plan_->overlaps())
    reduce_gradients();
  else  // the ranges were summed during the backward; the experts' fold after it
    plan_->fold_expert_gradients();
  for (const std::string& note : model_->take_notes()) log_.warn("step {}: {}", step + 1, note);
  plan_->sum_over_ranks(&loss_sum, 1);  // in rank order, as the grads
  loss_sum /= cfg_.parallel.world();
  r.loss = loss_sum / tc.grad_accum;
  r.grad_norm = opt_->grad_norm();
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.divergence = fmt::format("training diverged at step {}: loss {}, grad norm {}", step + 1,
                               r.loss, r.grad_norm);
    log_.error("{}", r.divergence);
    return r;
  }
  if (const auto spike = spikes_.add(r.loss)) {
    r.divergence = fmt::format("training diverged at step {}: {}", step + 1, *spike);
    log_.error("{}; stopped before its update and checkpoint", r.divergence);
    return r;
  }
  const ScopedRange range(*backend_, "optimizer step");
  opt_->step(r.lr, r.grad_norm);  // clips to optim.grad_clip by grad_norm
  // The sigmoid_bias router balances on the whole step's loads.
  for (std::vector<int64_t>* loads : model_->step_loads())
    plan_->sum_over_ranks(loads->data(), int64_t(loads->size()));
  model_->after_optimizer_step();
  return r;
}

void Trainer::reduce_gradients() {
  const Tensor& g = model_->grads();
  if (cfg_.train.grad_accum > 1) {  // grads = 0 + the micro-batches' sum
    backend_->zero(g);
    backend_->add_inplace(g, grad_acc_, g.numel());
  }
  plan_->sum_gradients(g);
}

void Trainer::on_grads_ready(int64_t begin, int64_t end) {
  const Tensor& g = model_->grads();
  if (cfg_.train.grad_accum > 1) {  // as after the loop and in reduce_gradients, on this range
    const Tensor gr = g.slice(begin, {end - begin}), acc = grad_acc_.slice(begin, {end - begin});
    backend_->add_inplace(acc, gr, end - begin);
    backend_->zero(gr);
    backend_->add_inplace(gr, acc, end - begin);
  }
  plan_->post_gradient_range(g, begin, end);
}

nlohmann::json Trainer::step_moe_json(MoeStepFigures moe) {
  if (moe.forwards > 0 && plan_->world() > 1) {  // every rank has the same MoE layers
    std::vector<int64_t> counts = {moe.forwards, moe.tokens, moe.dropped};
    for (const std::vector<int64_t>& layer : moe.loads)
      counts.insert(counts.end(), layer.begin(), layer.end());
    plan_->sum_over_ranks(counts.data(), int64_t(counts.size()));
    double sums[3] = {moe.aux, moe.z, moe.entropy};
    plan_->sum_over_ranks(sums, 3);
    moe.forwards = counts[0];
    moe.tokens = counts[1];
    moe.dropped = counts[2];
    size_t at = 3;
    for (std::vector<int64_t>& layer : moe.loads)
      for (int64_t& load : layer) load = counts[at++];
    moe.aux = sums[0];
    moe.z = sums[1];
    moe.entropy = sums[2];
  }
  return moe_json(moe, cfg_.model.moe);
}

bool Trainer::stop_agreed(const StopSignals& stop) { return plan_->any_rank(stop.requested()); }

void Trainer::after_step(int64_t done, const StepResult& r, double ms, double eta_s,
                         Progress& p) {
  const auto& tc = cfg_.train;
  const int64_t total = cfg_.total_steps();
  const bool last = done == total;
  // The steps an uninterrupted run records; the first step after a resume is also printed.
  const bool recorded = done % tc.log_interval == 0 || done == 1 || last;
  if (recorded || done == p.start + 1) {
    p.moe = step_moe_json(r.moe);
    log_.train_step({.step = done,
                     .total = total,
                     .tokens_per_step = cfg_.tokens_per_step(),
                     .train_loss = r.loss,
                     .lr = r.lr,
                     .grad_norm = r.grad_norm,
                     .ms = ms,
                     .eta_s = eta_s,
                     .moe = p.moe,
                     .record = recorded});
  }
  if ((tc.eval_interval > 0 && done % tc.eval_interval == 0) || last) {
    p.val_loss = evaluate();  // NaN when a stop signal cut it short
    if (std::isfinite(p.val_loss)) log_.val_loss(done, total, cfg_.tokens_per_step(), p.val_loss);
  }
  // (Under expert parallelism every rank must sample alike: no rank-local stop check.)
  if (tc.sample_interval > 0 && done % tc.sample_interval == 0 && !last && tc.sample_tokens > 0 &&
      (cfg_.parallel.ep > 1 || !stop_requested()))
    log_.info("sample at step {}:\n{}", done, sample(tc.sample_tokens, tc.seed ^ uint64_t(done)));
  if ((tc.checkpoint_interval > 0 && done % tc.checkpoint_interval == 0) || last) save(done, p);
}

void Trainer::train_loop(Progress& p, StepProfile& profile, const StopSignals& stop) {
  const int64_t total = cfg_.total_steps();
  StepTimeAverage step_time;
  using clock = std::chrono::steady_clock;
  while (p.step < total && !stop_agreed(stop)) {
    profile.begin_step(p.step);
    const auto t0 = clock::now();
    const StepResult r = train_step(p.step);
    if (r.interrupted) break;
    p.train_loss = r.loss;
    if (!r.divergence.empty()) {
      p.diverged = true;
      p.divergence = r.divergence;
      break;
    }
    profile.end_step();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    profile.add_step_ms(ms);
    step_time.add(ms, p.step == p.start);
    const int64_t done = ++p.step;
    after_step(done, r, ms, step_time.ms_per_step(ms) * double(total - done) / 1000.0, p);
    if (p.diverged) break;
  }
  if (!stop_agreed(stop) || p.diverged) return;
  if (p.step == p.saved || p.step == p.start) {
    log_.warn("interrupted at step {} (nothing new to save; resume with --resume)", p.step);
    return;
  }
  log_.warn("interrupted: saving a checkpoint at step {} (resume with --resume)", p.step);
  save(p.step, p);
}

void Trainer::finish(const Progress& p, double wall_s, StepProfile& profile, bool stopped) {
  const auto& tc = cfg_.train;
  if (!p.diverged && !stopped && p.step == cfg_.total_steps() && tc.sample_tokens > 0) {
    const std::string text = sample(tc.sample_tokens, tc.seed ^ uint64_t(p.step));
    log_.info("sample:\n{}", text);
    run_dir_.append_sample(p.step, text);
  }
  const RunOutcome outcome{.final_train_loss = p.train_loss,
                           .final_val_loss = p.val_loss,
                           .steps = p.step,
                           .steps_run = p.step - p.start,
                           .tokens_per_step = cfg_.tokens_per_step(),
                           .wall_s = wall_s,
                           .diverged = p.diverged,
                           .divergence = p.divergence,
                           .treatment = cfg_.precision.treatment.name};
  nlohmann::json summary = summary_json(outcome, model_->table(), backend_->ledger(),
                                              model_->store().count_in_scope());
  const auto floor = train_data_->entropy_floor_nats();
  if (floor) summary["entropy_floor"] = *floor;
  if (std::isfinite(p.initial_val_loss)) summary["initial_val_loss"] = p.initial_val_loss;
  if (!p.moe.is_null()) summary["moe"] = p.moe;
  if (plan_->world() > 1) {  // rank 0's traffic (every rank sends the same amounts)
    const CommBytes b = plan_->bytes_sent();
    const int64_t steps = std::max<int64_t>(p.step - p.start, 1);
    // A process that ran no step (a finished run's summary rebuilt) measured no step's traffic.
    const auto per_step = [&](double v) {
      return p.step > p.start ? nlohmann::json(v) : nlohmann::json();
    };
    summary["parallel"] = {
        {"communicator", plan_->communicator_name()},
        {"world", plan_->world()},
        {"dp", cfg_.parallel.dp},
        {"ep", cfg_.parallel.ep},
        {"zero", cfg_.parallel.zero},
        // How the gradient sums ran: during the backward (parallel.overlap) or after it.
        {"overlap", plan_->overlap_name()},
        {"bytes_sent", {{"all_reduce", b.all_reduce}, {"reduce_scatter", b.reduce_scatter},
                        {"all_gather", b.all_gather}, {"gather", b.gather},
                        {"broadcast", b.broadcast}, {"all_to_all", b.all_to_all},
                        {"total", b.total()}}},
        {"bytes_sent_per_step", per_step(double(b.total()) / double(steps))},
        {"bytes_sent_per_param_per_step",
         per_step(double(b.total()) / double(steps) / double(model_->table().total))}};
    if (opt_->sharded()) {
      // ZeRO-1's all-gather of the stored weights, per step, from the communicators' counters:
      // every rank sends its range to the w - 1 others, so the bytes all ranks sent over w - 1
      // are the payload gathered, here over the parameters it holds. Quantized: codes + scales
      // (bf16 weights would be 2).
      // (Under expert parallelism the experts' group of dp ranks sends to dp - 1 others.)
      double q_step = 0, v_step = 0;
      for (const Optimizer::GatherBytes& gb : opt_->gather_bytes()) {
        if (gb.world == 1) continue;
        int64_t sent[2] = {gb.quantized, gb.values};
        plan_->sum_over_ranks(sent, 2);
        const double per_step =
            double(gb.world - 1) * double(std::max<int64_t>(opt_->weight_gathers(), 1));
        q_step += double(sent[0]) / per_step;
        v_step += double(sent[1]) / per_step;
      }
      const ParamStore& store = model_->store();
      int64_t quantized = 0, values = 0;
      for (size_t i = 0; i < store.size(); ++i) {
        if (store.quantized(i)) quantized += model_->table().specs[i].numel();
        if (store.storage(i).value) values += model_->table().specs[i].numel();
      }
      nlohmann::json& z = summary["parallel"]["zero1_all_gather"];
      z["quantized_bytes_per_step"] = per_step(q_step);
      z["value_bytes_per_step"] = per_step(v_step);
      if (quantized > 0) z["bytes_per_quantized_param"] = per_step(q_step / double(quantized));
      if (values > 0) z["bytes_per_value"] = per_step(v_step / double(values));
    }
  }
  if (nlohmann::json prof = profile.finish(log_); !prof.is_null()) summary["profile"] = prof;
  run_dir_.write_summary(summary);
  if (floor && std::isfinite(p.val_loss))
    log_.info("final val loss {:.4f} vs entropy floor {:.4f} ({:+.1f}%)", p.val_loss, *floor,
              100.0 * (p.val_loss / *floor - 1.0));
}

void Trainer::evaluate_imported(Progress& p) {
  if (cfg_.model.init_from.empty() || !val_data_) return;
  if (p.resumed) {  // evaluated when the run started, before step 1
    p.initial_val_loss = recorded_metric(run_dir_.path(), 0, "val_loss");
    return;
  }
  // A fine-tune starts where the imported model is: its val loss under the run's treatment
  // (the weights as stored, quantized or not). A forward only: nothing the steps read changes.
  p.initial_val_loss = evaluate();
  if (std::isfinite(p.initial_val_loss))
    log_.val_loss(0, cfg_.total_steps(), cfg_.tokens_per_step(), p.initial_val_loss);
}

int Trainer::run(const RunOptions& opts) {
  for (const std::string& name : run_dir_.prepare())
    log_.warn("removed {}/{}, left by a write that was killed", run_dir_.path(), name);
  const StopSignals stop;  // from here on, SIGINT / SIGTERM stop the run at a checkpoint
  Progress p;
  {
    // Every rank reads the checkpoint or model.init_from: the faster ones wait for the others
    // here, under parallel.phase_timeout_s, rather than in the first step.
    const Communicator::PhaseGuard phase(*comm_, RunPhase::Load);
    start_or_resume(opts, p);
    plan_->wait_for_every_rank();
  }
  if (p.resumed && p.start == cfg_.total_steps() && finished_run_intact(p)) return 0;
  run_dir_.write_resolved_config(to_yaml(cfg_));
  log_.open_metrics(run_dir_.path(), p.resumed, p.start);
  log_run_header();
  evaluate_imported(p);

  StepProfile profile(cfg_.train.profile, *backend_, p.start, cfg_.total_steps(), log_);
  const auto run_start = std::chrono::steady_clock::now();
  train_loop(p, profile, stop);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  finish(p, wall_s, profile, stop_agreed(stop));  // every rank alike (a sample may follow)
  if (p.diverged) return 1;
  return stop.requested() ? stop.exit_code() : 0;
}

}  // namespace eco
