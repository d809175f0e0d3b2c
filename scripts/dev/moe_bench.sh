#!/usr/bin/env bash
# Speed of the sparse MoE against a dense model with the same active parameters, in one run:
# eco-bench on configs/smoe-lm1b-cpu.yaml and configs/dense-lm1b-cpu.yaml, alternated ROUNDS times
# so that a change in the machine's load hits both alike; prints each pair's tokens/s and the
# median ratio SMoE / dense (the target is >= 0.9). Both run the same treatment with the same
# quantization scope (every block linear: the attention on both sides, the experts or the dense
# MLP), so the ratio measures the MoE layer, not a difference in what is quantized.
#   scripts/dev/moe_bench.sh [--rounds N] [--threads N] [--treatment T] [--steps N]
# Defaults: 3 rounds, 1 thread, fp8-eco-sr, 10 steps after 2 warm-up steps. Needs build/eco-bench
# (scripts/build.sh) and no data: eco-bench trains on random tokens.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 threads=1 treatment=fp8-eco-sr steps=10
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --treatment) treatment=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: scripts/dev/moe_bench.sh [--rounds N] [--threads N] [--treatment T] [--steps N]" >&2; exit 2 ;;
  esac
done
[ -x build/eco-bench ] || { echo "moe_bench.sh: build/eco-bench not found: run scripts/build.sh" >&2; exit 2; }
export OMP_NUM_THREADS=$threads
bench() {  # CONFIG -> tokens/s (eco-bench's full output to stderr)
  local out
  out=$(build/eco-bench "$1" --steps "$steps" --warmup 2 --set train.threads="$threads" \
    --set precision.treatment="$treatment" --set precision.quantize=blocks 2>&1) ||
    { echo "$out" >&2; echo "moe_bench.sh: eco-bench $1 failed" >&2; exit 1; }
  sed -n 's/^eco-bench: .*(\(.*\))$/    \1/p' <<<"$out" >&2
  awk '$1 == "tokens/s" { print $2 }' <<<"$out"
}
echo "moe_bench: $treatment, $threads thread(s), $steps steps x $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for r in $(seq "$rounds"); do
  moe=$(bench configs/smoe-lm1b-cpu.yaml)
  dense=$(bench configs/dense-lm1b-cpu.yaml)
  ratio=$(awk -v a="$moe" -v b="$dense" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$ratio")
  echo "round $r: smoe $moe tokens/s, dense $dense tokens/s, ratio $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "moe_bench: SMoE / dense tokens/s, median of $rounds rounds: $median (target >= 0.9); load $(cut -d' ' -f1-3 /proc/loadavg)"
