// eco-train: train a model from a YAML config, or export a checkpoint for Hugging Face.
//   eco-train CONFIG.yaml [--set key=value]... [--plan] [--resume[=CHECKPOINT] |
//             --resume-if-present] [--resume-diverged] [--overwrite]
//   eco-train export CHECKPOINT --out DIR [--dtype bf16|f32] [--shard-size BYTES] [--codes]
// Exit codes: 0, 1 (I/O, checkpoint, divergence), 2 (usage, config, run directory), 3 (data),
// 130 / 143 (stopped by SIGINT / SIGTERM after its checkpoint).
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/test_faults.h"
#include "base/error.h"
#include "dist/communicator.h"
#include "dist/rank_agreement.h"
#include "hf/hf_export.h"
#include "hf/hf_import.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/thread_runtime.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: eco-train CONFIG.yaml [--set key=value]... [--plan]\n"
    "                 [--resume[=CHECKPOINT] | --resume-if-present] [--resume-diverged]\n"
    "                 [--overwrite]\n"
    "  --set key=value      override a config key (repeatable), e.g. --set optim.lr=3e-4\n"
    "  --plan               print the parameter table and memory ledger, and whether the run\n"
    "                       fits the device's memory (exit 2 when it does not), then exit\n"
    "  --resume             continue from the newest valid checkpoint in train.out_dir\n"
    "                       (an error when there is none)\n"
    "  --resume=PATH        continue from a specific checkpoint file\n"
    "  --resume-if-present  as --resume when train.out_dir holds a checkpoint, else start\n"
    "  --resume-diverged    with a --resume flag: resume a run whose summary.json says it\n"
    "                       diverged after the checkpoint (without it that is refused, exit 1)\n"
    "  --overwrite          start over in a train.out_dir holding an earlier run's checkpoints,\n"
    "                       deleting them (without it such a start is refused)\n"
    "\n"
    "usage: eco-train export CHECKPOINT --out DIR [--dtype bf16|f32] [--shard-size BYTES] [--codes]\n"
    "  writes the checkpoint's model as a Hugging Face checkpoint: DIR/config.json and\n"
    "  DIR/model.safetensors (gpt2 -> GPT2LMHeadModel, llama -> LlamaForCausalLM, gemma3 ->\n"
    "  Gemma3ForCausalLM, llama + model.moe -> MixtralForCausalLM or DeepSeek-MoE's naming)\n"
    "  --dtype bf16|f32      dtype of the weights (default bf16; quantized ones dequantized)\n"
    "  --shard-size BYTES    above this, shards + model.safetensors.index.json (default 5GB;\n"
    "                        suffixes KB MB GB, KiB MiB GiB)\n"
    "  --codes               quantized weights as NAME.codes (u8) + NAME.scales (f32)\n";

// BYTES, or BYTES with a decimal (KB, MB, GB) or binary (KiB, MiB, GiB) suffix.
uint64_t parse_bytes(const std::string& text) {
  size_t end = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  const std::string suffix = text.substr(end);
  const std::pair<const char*, uint64_t> units[] = {
      {"", 1},          {"B", 1},           {"KB", 1000},      {"MB", 1000000},
      {"GB", 1000000000}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
  for (const auto& [name, scale] : units)
    if (end > 0 && suffix == name && n > 0 && n <= (uint64_t(1) << 50) / scale) return n * scale;
  eco::usage_error("--shard-size '{}': expected a positive number of bytes (e.g. 5GB, 500MiB)",
                   eco::clip_for_message(text));
}

int run_export(int argc, char** argv) {
  std::string checkpoint;
  eco::HfExportOptions opts;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) eco::usage_error("{} needs a value (see eco-train --help)", flag);
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--out") {
      opts.out_dir = value("--out");
    } else if (a == "--dtype") {
      const std::string d = value("--dtype");
      if (d == "bf16") opts.dtype = eco::StDType::BF16;
      else if (d == "f32") opts.dtype = eco::StDType::F32;
      else eco::usage_error("--dtype '{}': expected bf16 or f32", eco::clip_for_message(d));
    } else if (a == "--shard-size") {
      opts.shard_bytes = parse_bytes(value("--shard-size"));
    } else if (a == "--codes") {
      opts.codes = true;
    } else if (!a.empty() && a[0] == '-') {
      eco::usage_error("export: unknown option '{}' (see eco-train --help)", a);
    } else if (checkpoint.empty()) {
      checkpoint = a;
    } else {
      eco::usage_error("export: unexpected argument '{}' (one checkpoint expected)", a);
    }
  }
  if (checkpoint.empty()) eco::usage_error("export: no checkpoint given (usage: eco-train export CHECKPOINT --out DIR)");
  if (opts.out_dir.empty()) eco::usage_error("export: --out DIR is required");
  const std::vector<std::string> files = eco::export_hf(checkpoint, opts);
  for (const std::string& f : files) std::printf("wrote %s\n", f.c_str());
  return 0;
}

// FNV-1a of the text: the same on every rank for the same bytes.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank must train the same run: the resolved config and the source revision this binary
// was configured from (ECO_BUILD_ID: git describe at cmake time) are compared across ranks, and
// a difference is an error on all of them, naming the ranks.
void check_ranks_agree(const eco::Config& cfg, eco::Communicator& comm) {
  const std::vector<std::vector<int>> differ =
      eco::ranks_differing_from_lead(comm, {fnv1a(eco::to_yaml(cfg)), fnv1a(ECO_BUILD_ID)});
  std::string config_differs, binary_differs;
  for (int r : differ[0]) config_differs += fmt::format(" {}", r);
  for (int r : differ[1]) binary_differs += fmt::format(" {}", r);
  if (!config_differs.empty())
    eco::usage_error("{}: the resolved config of rank(s){} differs from rank 0's (every rank must "
                     "read the same file with the same --set overrides)",
                     cfg.source_path, config_differs);
  if (!binary_differs.empty())
    eco::usage_error("rank(s){} run an eco-train built from another source revision than rank "
                     "0's ({}; rebuild it on every node from the same source)",
                     binary_differs, ECO_BUILD_ID);
}

int run(int argc, char** argv, eco::Communicator& comm) {
  if (argc > 1 && std::string(argv[1]) == "export") {
    if (comm.world() > 1) eco::usage_error("export runs as one process (not under mpirun)");
    return run_export(argc, argv);
  }
  std::string config_path;
  std::vector<std::string> overrides;
  bool plan = false;
  eco::RunOptions opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--set") {
      if (i + 1 >= argc) eco::usage_error("--set needs KEY=VALUE (see eco-train --help)");
      overrides.push_back(argv[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      overrides.push_back(a.substr(6));
    } else if (a == "--plan") {
      plan = true;
    } else if (a == "--resume") {
      opts.resume = true;
    } else if (a == "--resume-if-present") {
      opts.resume_if_present = true;
    } else if (a == "--resume-diverged") {
      opts.resume_diverged = true;
    } else if (a == "--overwrite") {
      opts.overwrite = true;
    } else if (a.rfind("--resume=", 0) == 0) {
      opts.resume = true;
      opts.resume_path = a.substr(9);
      if (opts.resume_path.empty()) eco::usage_error("--resume= needs a checkpoint path");
    } else if (!a.empty() && a[0] == '-') {
      eco::usage_error("unknown option '{}' (see eco-train --help)", a);
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      eco::usage_error("unexpected argument '{}' (one config file expected; see eco-train --help)", a);
    }
  }
  if (config_path.empty()) eco::usage_error("no config file given (usage: eco-train CONFIG.yaml [options]; see --help)");
  if (opts.resume && opts.resume_if_present)
    eco::usage_error("--resume and --resume-if-present exclude each other");
  if (opts.resume_diverged && !opts.resume && !opts.resume_if_present)
    eco::usage_error("--resume-diverged goes with --resume, --resume=PATH or --resume-if-present");
  if (opts.overwrite && (opts.resume_if_present || (opts.resume && opts.resume_path.empty())))
    eco::usage_error("--overwrite starts over; it goes with a fresh start or --resume=PATH, not "
                     "with --resume or --resume-if-present");
  const eco::Config cfg = eco::load_config(config_path, overrides);
  eco::stall_for_test("agreement", comm.rank());
  check_ranks_agree(cfg, comm);  // under the start-up bound: the config is not agreed before
  comm.set_timeouts(cfg.parallel.timeout_s, cfg.parallel.phase_timeout_s);
  if (plan) {
    if (comm.rank() != 0) return 0;  // one plan: the largest rank's share (the plan names it)
    const eco::MemoryFit fit = eco::memory_fit(cfg);
    std::fputs(eco::plan_report(cfg).c_str(), stdout);
    std::printf("memory: %s: %s\n", fit.describe().c_str(),
                fit.fits() ? "fits" : "does not fit");
    std::fflush(stdout);
    if (!fit.fits())
      eco::usage_error("{}: the run does not fit: {}", config_path, fit.describe());
    return 0;
  }
  // A fresh start reads model.init_from: the whole import is checked (every rank, every tensor)
  // before the run directory is touched. A resumed run never reads it; --resume-if-present
  // starts afresh, and so reads it, when train.out_dir holds no checkpoint.
  const bool fresh = !opts.resume && (!opts.resume_if_present ||
                                      eco::list_checkpoints(cfg.train.out_dir).empty());
  if (fresh && !cfg.model.init_from.empty()) {
    eco::check_init_from(cfg);
    eco::check_hf_import(cfg.model.init_from, cfg.model);
  }
  spdlog::info("BLAS: {}; OpenMP waits: {}", eco::cpu::blas_summary_line(),
               eco::cpu::omp_wait_summary_line());
  eco::Trainer trainer(cfg, eco::RunContext{comm.rank(), comm.world()}, &comm);
  return trainer.run(opts);
}

}  // namespace

int main(int argc, char** argv) {
  eco::cpu::ensure_cpu_runtime(argv);  // may re-exec (BLAS core, OpenMP wait): before all else
  spdlog::set_pattern("[%H:%M:%S] %^%v%$");
  std::unique_ptr<eco::Communicator> comm;
  int code = 0;
  std::string error;
  try {
    comm = eco::make_communicator(&argc, &argv);
    return run(argc, argv, *comm);
  } catch (const eco::Error& e) {
    error = e.what();
    code = e.exit_code();
  } catch (const std::exception& e) {
    error = e.what();
    code = 1;
  }
  const bool several = comm && comm->world() > 1;
  const std::string who =
      several ? fmt::format("[rank {}/{}] ", comm->rank(), comm->world()) : std::string();
  std::fprintf(stderr, "eco-train: error: %s%s\n", who.c_str(), error.c_str());
  std::fflush(stderr);
  // A rank that fails alone must not leave the others waiting in a collective.
  if (several) comm->abort(code);
  return code;
}
