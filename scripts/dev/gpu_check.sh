#!/usr/bin/env bash
# One command for a GPU machine: builds for the GPU it finds, runs the GPU tests (each CUDA
# kernel against its CPU twin, and the whole model against the CPU backend), the GPU benchmarks,
# 2 data-parallel MPI ranks sharing the GPU against one rank (tests/e2e/data_parallel_cuda.sh),
# short GPT-2 124M training runs (bf16-mw with the default attention path and with
# ECO_CUDA_ATTENTION=mma, fp8-eco-sr), one of 8 of the 2.1B SMoE's layers (fp8-eco-sr, experts
# quantized) and 6 of Gemma 3 1B's layers (fp8-eco-sr, flash and mma attention); prints a summary
# table last. Full log in the directory given as argument. Each part runs under a timeout (tests
# 240 + 90 s, the data-parallel check 150 s, 2 benchmarks of 50 s, 6 training runs of 40 s:
# 860 s at worst, the build apart); on an H200 the tests and runs take a few minutes when they
# pass, so give the device call 600 s and rerun what a timeout cut off.
#   scripts/dev/gpu_check.sh LOG_DIR
# ECO_GPU_PREBUILT=DIR uses binaries built elsewhere (DIR/tests/eco_gpu_tests, DIR/eco-*-bench,
# shared libraries the GPU machine lacks in DIR/libs) instead of building here, for GPU machines
# without the build dependencies.
set -uo pipefail
cd "$(dirname "$0")/../.."
log_dir=${1:?usage: scripts/dev/gpu_check.sh LOG_DIR}
mkdir -p "$log_dir"
log=$log_dir/gpu_check.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
start=$(date +%s)

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "gpu_check: no GPU found (nvidia-smi); nothing to check"
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader | head -1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
arch=$cap
[ "$cap" = 90 ] && arch=90a
say "gpu_check: $gpu -> building for sm_$arch"

bin=build-gpu
if [ -n "${ECO_GPU_PREBUILT:-}" ]; then
  bin=$ECO_GPU_PREBUILT
  export LD_LIBRARY_PATH="$bin/libs:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  say "gpu_check: using prebuilt binaries in $bin"
else
  # Build only what the GPU run needs, for this GPU only (fast). install_deps.sh installs missing
  # dependencies when the machine can reach the package registries.
  scripts/install_deps.sh >>"$log" 2>&1 || say "gpu_check: install_deps failed (continuing)"
  if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DECO_CUDA=ON -DECO_CUDA_ARCHS="$arch" \
      >>"$log" 2>&1; then
    say "gpu_check: cmake failed (see $log)"; tail -20 "$log"; exit 1
  fi
  targets=(eco_gpu_tests eco-train eco-ckpt)
  for t in eco-gemm-bench eco-update-bench; do
    grep -q "add_executable($t" CMakeLists.txt && targets+=("$t")
  done
  if ! cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >>"$log" 2>&1; then
    say "gpu_check: build failed (see $log)"; grep -E "error" "$log" | head -20; exit 1
  fi
  say "gpu_check: built ${targets[*]} in $(( $(date +%s) - start )) s"
fi

# GPU tests, in two processes: the kernels not yet verified on a GPU (the mma attention, its
# grouped-query / windowed form for gemma3 included) run on their own, so that a fault there
# (which poisons the CUDA context) cannot take the others along.
unverified='GpuAttentionMma*:GpuAttentionGqa.Mma*:GpuAttentionGqa.BackwardTakesTheOtherPathsLse'
unverified+=':GpuAttentionGqa.ForwardAndBackwardAreDeterministic'
unverified+=':GpuAttentionGqa.BackendRunsTheFlashKernelByDefaultAndMmaWhenAsked'
timeout 240 "$bin"/tests/eco_gpu_tests --gtest_filter="-$unverified" \
  --gtest_output=xml:"$log_dir/gpu_tests.xml" >"$log_dir/gpu_tests.log" 2>&1
tests_rc=$?
timeout 90 "$bin"/tests/eco_gpu_tests --gtest_filter="$unverified" \
  --gtest_output=xml:"$log_dir/gpu_tests_unverified.xml" >>"$log_dir/gpu_tests.log" 2>&1
mma_rc=$?
[ "$tests_rc" = 0 ] && tests_rc=$mma_rc
cat "$log_dir/gpu_tests.log" >>"$log"
mma_passed=$(grep -c '^\[       OK \] GpuAttentionMma\.' "$log_dir/gpu_tests.log")
mma_skipped=$(grep -c '^\[  SKIPPED \] GpuAttentionMma\.' "$log_dir/gpu_tests.log")
# Data parallelism on the GPU: 2 MPI ranks sharing it against one rank accumulating 2, ZeRO-1,
# and expert parallelism (ep 2) against dp 2.
timeout 150 bash tests/e2e/data_parallel_cuda.sh "$bin/eco-train" . >"$log_dir/data_parallel_cuda.log" 2>&1
dp_rc=$?
cat "$log_dir/data_parallel_cuda.log" >>"$log"
passed=$(grep -c '^\[       OK \]' "$log_dir/gpu_tests.log")
failed=$(grep -c '^\[  FAILED  \].*(' "$log_dir/gpu_tests.log")
skipped=$(grep -c '^\[  SKIPPED \].*(' "$log_dir/gpu_tests.log")

# Benchmarks (each prints its own table; the last lines are collected below).
bench_out=$log_dir/benchmarks.log
: >"$bench_out"
for b in eco-gemm-bench eco-update-bench; do
  if [ -x "$bin/$b" ]; then
    echo "== $b" >>"$bench_out"
    timeout 50 "$bin/$b" >>"$bench_out" 2>&1 || echo "$b failed (exit $?)" >>"$bench_out"
  fi
done
cat "$bench_out" >>"$log"

# Training on the GPU: GPT-2 124M, B 64 x T 1024 (llm.c's micro-batch), synthetic data, 20 steps
# logged every step (configs/gpt2-124m-gpu.yaml), once per treatment. Speed from the median
# ms/step of steps 6-20 (the first steps pick cuBLASLt algorithms), with train.profile on (a
# CUDA event pair around each backend operation: the ms/step breakdown); peak memory sampled by
# nvidia-smi every 100 ms, against the idle reading before the run; static bytes per quantized
# parameter from the run's memory ledger (summary.json). MFU counts 6 x params + 12 x layers x
# T x d_model FLOPs per token (matmuls forward + backward, attention as if non-causal, PaLM's
# convention) against 989 TFLOP/s, the H100/H200 SXM dense bf16 datasheet peak.
train_rows=()
train_rc=0
if [ -x "$bin/eco-train" ] && "$bin"/eco-train configs/gpt2-124m-gpu.yaml --plan >/dev/null 2>&1; then
  # label:treatment:attention path (ECO_CUDA_ATTENTION; the mma row measures the flash kernel on
  # tensor cores against the default path in the same run).
  # The SMoE row trains 8 of the paper's 24 SMoE layers (configs/smoe-2.1b.yaml: the same expert
  # GEMM shapes; 0.7B parameters, so that the final checkpoint stays a few GB) on synthetic tokens,
  # one micro-batch of 16 x 512 a step: tokens/s, and the expert GEMMs' TFLOP/s (expert FLOPs over
  # the time of the quantized linears, which under quantize: experts are exactly the experts').
  smoe_set=(--set model.n_layer=8 --set data.source=synthetic --set train.grad_accum=1
    --set train.max_tokens=163840
    --set train.log_interval=1 --set train.eval_batches=2 --set train.sample_tokens=0)
  # The gemma3 rows train 6 of Gemma 3 1B's 26 layers (configs/gemma3-1b.yaml: 5 local layers with
  # the 512 window, 1 global; 4 query heads on 1 kv head of 256), B 16 x T 512, synthetic tokens:
  # the family's kernels on the GPU, grouped-query attention on the flash kernel (auto) and on
  # the mma path.
  gemma3_set=("${smoe_set[@]}")
  gemma3_set[1]=model.n_layer=6
  for run in bf16-mw:bf16-mw:auto:gpt2 bf16-mw/mma:bf16-mw:mma:gpt2 fp8-eco-sr:fp8-eco-sr:auto:gpt2 \
    smoe-eco-sr:fp8-eco-sr:auto:smoe gemma3-sr:fp8-eco-sr:auto:gemma3 \
    gemma3-sr/mma:fp8-eco-sr:mma:gemma3; do
    IFS=: read -r label treatment attention model <<<"$run"
    tr=${label//\//-}
    config=configs/gpt2-124m-gpu.yaml
    extra=()
    if [ "$model" = smoe ]; then
      config=configs/smoe-2.1b.yaml
      extra=("${smoe_set[@]}")
    elif [ "$model" = gemma3 ]; then
      config=configs/gemma3-1b.yaml
      extra=("${gemma3_set[@]}")
    fi
    run_dir=$(mktemp -d /tmp/eco-gpu-train.XXXXXX)
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 \
      >"$log_dir/train_$tr.mem" 2>/dev/null &
    smi=$!
    ECO_CUDA_ATTENTION=$attention timeout 40 "$bin"/eco-train "$config" "${extra[@]}" \
      --set precision.treatment="$treatment" \
      --set train.out_dir="$run_dir" --set train.profile=true >"$log_dir/train_$tr.log" 2>&1
    rc=$?
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    cat "$log_dir/train_$tr.log" >>"$log"
    for f in metrics.jsonl summary.json config.resolved.yaml; do
      cp "$run_dir/$f" "$log_dir/train_$tr.$f" 2>/dev/null
    done
    rm -rf "$run_dir"  # the checkpoint (~1.5 GB) is not kept
    [ "$rc" = 0 ] || train_rc=$rc
    row=$(python3 - "$log_dir" "$tr" "$idle" "$rc" <<'PY' 2>&1
import json, re, statistics, sys
d, tr, idle, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
p = f"{d}/train_{tr}"
def last_words():  # why a run left no output: its log's last line
    try:
        return [l.strip() for l in open(p + ".log") if l.strip()][-1][:160]
    except (OSError, IndexError):
        return "no log"
try:
    steps = [json.loads(l) for l in open(p + ".metrics.jsonl")]
    steps = [s for s in steps if "ms_per_step" in s]
    cfg = open(p + ".config.resolved.yaml").read()
except OSError as e:
    print(f"{tr:<12} exit {rc}: no run output ({e.filename}): {last_words()}")
    sys.exit()
if not steps:
    print(f"{tr:<12} exit {rc}: no step finished: {last_words()}")
    sys.exit()
try:  # written at the end: a run cut off by the timeout has none, but its steps still count
    summ = json.load(open(p + ".summary.json"))
except OSError:
    summ = {}
params = summ.get("params")
if params is None:  # the log's first line: "model: ..., N parameters; ..."
    m = re.search(r"(\d+) parameters", open(p + ".log").read())
    params = int(m.group(1)) if m else float("nan")
key = lambda k: int(re.search(rf"\b{k}: (\d+)", cfg).group(1))
L, T, C, B = key("n_layer"), key("seq_len"), key("d_model"), key("batch_size")
timed = [s["ms_per_step"] for s in steps if s["step"] > 5] or [s["ms_per_step"] for s in steps]
ms = statistics.median(timed)
tok_s = B * T / (ms / 1000)
params = summ.get("active_params", params)  # MoE: the weights a token goes through
mfu = (6 * params + 12 * L * T * C) * tok_s / 989e12
mem = [float(x) for x in open(p + ".mem").read().split() if x.replace(".", "").isdigit()]
peak = (max(mem) - idle) / 1024 if mem else float("nan")
m = summ.get("memory", {})
nan = float("nan")
loss = summ.get("final_train_loss") or steps[-1].get("train_loss", nan)
print(f"{tr:<12} {ms:8.1f} {tok_s:10.0f} {100 * mfu:6.1f}% {peak:10.2f} "
      f"{m.get('total', nan) / 2**30:10.2f} {m.get('static_bytes_per_quantized_param', nan):8.3f} "
      f"{loss:8.4f}  exit {rc}" + ("" if summ else f", {len(steps)} steps, no summary.json"))
prof = summ.get("profile")
moe = re.search(r"n_experts: (\d+)", cfg)
if moe and prof:  # the expert GEMMs: 6 x (active expert weights) FLOPs per token over their time
    k, H = key("top_k"), key("expert_hidden")
    fc = 2 * H if re.search(r"expert_act: swiglu", cfg) else H
    expert_flops = 6 * L * k * (fc * C + C * H) * B * T
    ops = prof["operations"]
    ms_q = sum(ops.get(o, {}).get("ms_per_step", 0.0)
               for o in ("quantized_linear_forward", "quantized_linear_backward"))
    if ms_q > 0:  # (bf16-mw keeps the experts in plain matmuls, beside attention's)
        print(f"{'':<12} expert GEMMs {expert_flops / (ms_q / 1000) / 1e12:.1f} TFLOP/s "
              f"({ms_q:.1f} ms/step in the quantized linears)")
if prof:
    ops = sorted(prof["operations"].items(), key=lambda kv: -kv[1]["ms_per_step"])
    parts = [f"{k} {v['ms_per_step']:.1f}" for k, v in ops[:9]]
    parts.append(f"other {prof['other_ms_per_step']:.1f}")
    with open(f"{d}/breakdown_{tr}.txt", "w") as out:
        out.write(f"{tr}: {prof['ms_per_step']:.1f} ms/step over {prof['steps']} profiled steps = "
                  + ", ".join(parts) + "\n")
PY
)
    train_rows+=("$row")
  done
  train_note="GPT-2 124M, B 64 x T 1024, 20 steps (configs/gpt2-124m-gpu.yaml); smoe-eco-sr: 8 of the 2.1B SMoE's 24 layers (configs/smoe-2.1b.yaml), B 16 x T 512, 20 steps, synthetic tokens; gemma3-sr: 6 of Gemma 3 1B's 26 layers (configs/gemma3-1b.yaml), B 16 x T 512, 20 steps, synthetic tokens, fp8-eco-sr, attention on the flash kernel (auto) and the mma path; MFU (active parameters) vs 989 TFLOP/s"
else
  train_note="skipped: $bin/eco-train missing or refuses configs/gpt2-124m-gpu.yaml (--plan)"
fi

say ""
say "================ gpu_check summary ================"
say "GPU:            $gpu"
say "GPU tests:      $passed passed, $failed failed, $skipped skipped (exit $tests_rc)"
grep '^\[  FAILED  \].*(' "$log_dir/gpu_tests.log" | sed 's/^/  /' | tee -a "$log"
say "data parallel: exit $dp_rc (0 passed, 77 skipped: no mpirun or MPI; tests/e2e/data_parallel_cuda.sh)"
grep '^ok:\|^FAIL\|^SKIP' "$log_dir/data_parallel_cuda.log" | sed 's/^/  /' | tee -a "$log"
say "benchmarks:"
grep -E "^\|| GB/s|TFLOP/s|fraction|failed" "$bench_out" | sed 's/^/  /' | tee -a "$log"
say "training:       $train_note"
if [ "${#train_rows[@]}" -gt 0 ]; then
  say "  (peak GiB: nvidia-smi above idle, CUDA context included; ledger GiB: the run's own buffers)"
  say "  treatment     ms/step   tokens/s    MFU  peak GiB  ledger GiB  B/q-par  loss@end"
  for r in "${train_rows[@]}"; do say "  $r"; done
  say "  ms/step by operation (train.profile: CUDA events around each backend operation):"
  for f in "$log_dir"/breakdown_*.txt; do [ -f "$f" ] && say "  $(cat "$f")"; done
fi
# The verdict on the mma attention (ECO_CUDA_ATTENTION=auto keeps the GEMM path until it has
# passed its tests on a GPU and trains faster; kernels/cuda/cuda_attention.h).
ms_of() { for r in "${train_rows[@]}"; do [ "${r%% *}" = "$1" ] && awk '{print $2}' <<<"$r"; done; }
gemm_ms=$(ms_of bf16-mw)
mma_ms=$(ms_of bf16-mw-mma)
if [ "$mma_skipped" != 0 ]; then
  verdict="$mma_skipped of its tests skipped (no GPU): keep auto on the GEMM path"
elif [ "$mma_rc" != 0 ] || [ "$mma_passed" = 0 ]; then
  verdict="its tests did not pass ($mma_passed passed, exit $mma_rc): keep auto on the GEMM path"
elif ! [[ "$gemm_ms" =~ ^[0-9.]+$ && "$mma_ms" =~ ^[0-9.]+$ ]]; then
  verdict="its $mma_passed tests passed; no training times to compare"
elif awk -v a="$mma_ms" -v b="$gemm_ms" 'BEGIN { exit !(a < b) }'; then
  verdict="its $mma_passed tests passed and it trains faster ($mma_ms vs $gemm_ms ms/step): let auto pick it"
else
  verdict="its $mma_passed tests passed but it is not faster ($mma_ms vs $gemm_ms ms/step)"
fi
say "mma attention:  $verdict"
say "wall time:      $(( $(date +%s) - start )) s; full log: $log"
[ "$tests_rc" = 0 ] && [ "$train_rc" = 0 ] && { [ "$dp_rc" = 0 ] || [ "$dp_rc" = 77 ]; }
