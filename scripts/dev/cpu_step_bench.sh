#!/usr/bin/env bash
# Training speed of ecotrain against llm.c's CPU trainer and PyTorch eager on the GPT-2 124M shape
# (fp32, B 4 x T 64, 2 threads), in one sitting: ROUNDS rounds, each running the three one after
# the other, so that a change in the machine's load hits all alike. Prints each system's tokens/s
# per round, its median, and ecotrain's median over each of the others'.
#   scripts/dev/cpu_step_bench.sh [--rounds N] [--llmc DIR] [--threads N] [--steps N]
# Defaults: 3 rounds, 2 threads, 5 timed steps after 2 warm-up steps for every system.
#   ecotrain: build/eco-bench configs/gpt2-124m-cpu-bench.yaml --steps N --warmup 2
#             --set train.threads=THREADS (its "median ms/step" and "tokens/s" lines).
#   llm.c:    train_gpt2 built by llm.c's own Makefile (make train_gpt2: -Ofast -march=native,
#             OpenMP), OMP_NUM_THREADS=THREADS, on tools/llmc_fixture.py's random-weight
#             gpt2_124M.bin and random token files (no download); the median of its per-step
#             "took X ms" lines after the first 2 steps (step 0 also allocates and first-touches
#             the activations, gradients and AdamW state).
#   PyTorch:  tools/torch_cpu_bench.py --threads THREADS --steps N --warmup 2 (nanoGPT-style fp32
#             GPT-2 124M, tied embeddings, GELU tanh, AdamW foreach; a step times zero_grad,
#             forward, backward and the optimizer step).
# llm.c comes from --llmc DIR, a checkout or a bare git directory (default $LLMC_DIR, else the
# mirror at /work/.mirror/karpathy+llm.c/repo when it exists); its Makefile, train_gpt2.c and
# llmc/ are copied to build/llmc-bench/src/ (ignored by git) and built there; it runs in
# build/llmc-bench/run/, which holds the fixture (written once, ~0.5 GB). The copy of
# train_gpt2.c is patched with sed, nothing else:
#   - the training loop `step <= 40` becomes `step <= 2 + N - 1`: 41 steps take minutes each
#     round, and from step 20 on it samples 63 full forward passes (with no tokenizer file it
#     prints token ids); with N <= 18 no sampling runs;
#   - `val_num_batches = 5` becomes 1: the validation at step 0 runs outside the timed region
#     and only costs wall time.
# Every run's full output is kept in build/llmc-bench/logs/ROUND-SYSTEM.log.
# The user's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE / OMP_* settings are removed, as for every
# shipped figure. Needs build/eco-bench (scripts/build.sh), python3 with numpy and torch, make and
# a C compiler with OpenMP: make's built-in CC (cc) unless CC is set (the Makefile's `CC ?= clang`
# does not override make's built-in value); the header line names the one used.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 threads=2 steps=5 warmup=2 llmc=${LLMC_DIR:-}
usage="usage: scripts/dev/cpu_step_bench.sh [--rounds N] [--llmc DIR] [--threads N] [--steps N]"
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --llmc) llmc=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
fail() { echo "cpu_step_bench.sh: $*" >&2; exit 1; }
[ "$steps" -le 18 ] || fail "--steps $steps: expected at most 18 (from step 20 on llm.c samples text)"
[ -x build/eco-bench ] || fail "build/eco-bench not found: run scripts/build.sh"
python3 -c "import numpy" 2>/dev/null || fail "python3 cannot import numpy: pip install numpy"
python3 -c "import torch" 2>/dev/null || fail "python3 cannot import torch: pip install torch (the CPU wheel is enough)"
mirror=/work/.mirror/karpathy+llm.c/repo
[ -n "$llmc" ] || { [ -d "$mirror" ] && llmc=$mirror; } ||
  fail "no llm.c source: git clone https://github.com/karpathy/llm.c and pass --llmc DIR (or set LLMC_DIR)"

# llm.c: copy the three things train_gpt2 is built from, patch, build, lay out its inputs.
scratch=build/llmc-bench
rm -rf "$scratch/src" && mkdir -p "$scratch/src"
if [ -f "$llmc/train_gpt2.c" ]; then
  cp -r "$llmc/Makefile" "$llmc/train_gpt2.c" "$llmc/llmc" "$scratch/src/"
  llmc_rev=$(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
elif git --git-dir="$llmc" rev-parse --verify -q HEAD:train_gpt2.c >/dev/null 2>&1; then
  git --git-dir="$llmc" archive HEAD Makefile train_gpt2.c llmc | tar -x -C "$scratch/src"
  llmc_rev=$(git --git-dir="$llmc" rev-parse --short HEAD)
else
  fail "--llmc $llmc: expected an llm.c checkout or bare git directory holding train_gpt2.c"
fi
last_step=$((warmup + steps - 1))
src=$scratch/src/train_gpt2.c
sed -i -e "s/for (int step = 0; step <= 40; step++)/for (int step = 0; step <= $last_step; step++)/" \
  -e 's/int val_num_batches = 5;/int val_num_batches = 1;/' "$src"
grep -q "step <= $last_step; step++" "$src" && grep -q 'val_num_batches = 1;' "$src" ||
  fail "$src (llm.c $llmc_rev): the training loop or val_num_batches line is not where expected; patch by hand"
make_out=$(make -C "$scratch/src" train_gpt2 2>&1) || { echo "$make_out" >&2; fail "make train_gpt2 failed in $scratch/src"; }
grep -q 'OpenMP found' <<<"$make_out" ||
  { echo "$make_out" >&2; fail "llm.c's Makefile found no OpenMP: install libomp-dev (or set CC=gcc)"; }
llmc_cc=$(grep -m1 -o '^[^ ]* -Ofast.*-o train_gpt2' <<<"$make_out" | cut -d' ' -f1 || true)
[ -f "$scratch/run/gpt2_124M.bin" ] || python3 tools/llmc_fixture.py "$scratch/run" >/dev/null

logs=$scratch/logs
rm -rf "$logs" && mkdir -p "$logs"
clean_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_NUM_THREADS -u OMP_WAIT_POLICY
  -u GOMP_SPINCOUNT -u OMP_PROC_BIND -u OMP_PLACES)
tokens_per_step=$((4 * 64))
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
bench_eco() {  # LOG -> tokens/s
  local out
  out=$("${clean_env[@]}" timeout 900 build/eco-bench configs/gpt2-124m-cpu-bench.yaml \
    --steps "$steps" --warmup "$warmup" --set train.threads="$threads" 2>&1) ||
    { echo "$out" >&2; fail "eco-bench failed"; }
  echo "$out" >"$1"
  awk '/^tokens\/s/{print $2}' <<<"$out"
}
bench_llmc() {  # LOG -> tokens/s
  local out ms
  out=$(cd "$scratch/run" && "${clean_env[@]}" OMP_NUM_THREADS="$threads" timeout 1800 ../src/train_gpt2 2>&1) ||
    { echo "$out" >&2; fail "llm.c train_gpt2 failed"; }
  echo "$out" >"$1"
  ms=$(sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)$/\1 \2/p' <<<"$out" |
    awk -v w="$warmup" '$1 >= w {printf "%s ", $2}')
  [ -n "$ms" ] || { echo "$out" >&2; fail "no 'step N: ... (took X ms)' lines from train_gpt2"; }
  awk -v ms="$(median "$ms")" -v t="$tokens_per_step" 'BEGIN{printf "%.1f\n", t / (ms / 1000)}'
}
bench_torch() {  # LOG -> tokens/s
  local out
  out=$("${clean_env[@]}" timeout 900 python3 tools/torch_cpu_bench.py --threads "$threads" \
    --steps "$steps" --warmup "$warmup" 2>&1) || { echo "$out" >&2; fail "tools/torch_cpu_bench.py failed"; }
  echo "$out" >"$1"
  awk '/^tokens\/s/{print $2}' <<<"$out"
}

systems=(ecotrain llm.c pytorch)
declare -A runner=([ecotrain]=bench_eco [llm.c]=bench_llmc [pytorch]=bench_torch) tps
echo "cpu_step_bench: GPT-2 124M fp32, B 4 x T 64, $threads threads, $steps steps after $warmup warm-up," \
  "$rounds round(s); llm.c $llmc_rev ($llmc_cc); $(python3 -c 'import torch; print("torch", torch.__version__)')"
echo "load $(cut -d' ' -f1-3 /proc/loadavg); logs in $logs/"
for r in $(seq 1 "$rounds"); do
  for s in "${systems[@]}"; do
    t=$(${runner[$s]} "$logs/$r-$s.log")
    tps[$s]+="$t "
    echo "round $r: $s $t tokens/s"
  done
done
eco=$(median "${tps[ecotrain]}")
echo
printf '%-10s %-30s %10s %10s\n' system "tokens/s per round" median "eco / it"
for s in "${systems[@]}"; do
  m=$(median "${tps[$s]}")
  printf '%-10s %-30s %10s %10.2f\n' "$s" "${tps[$s]% }" "$m" "$(awk -v e="$eco" -v m="$m" 'BEGIN{print e/m}')"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
