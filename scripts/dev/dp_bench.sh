#!/usr/bin/env bash
# Data-parallel scaling on the CPU: 2 ranks x 1 thread (mpirun, parallel.dp 2)
# against 1 rank x 2 threads accumulating the same 2 micro-batches a step, in one sitting,
# alternated ROUNDS times so that a change in the machine's load hits both alike. Tokens/s is
# the median of the steps after the first few (metrics.jsonl, one line a step). Prints each
# round's tokens/s and the median ratio (2 ranks / 1 rank; the target is >= 0.9).
#   scripts/dev/dp_bench.sh [CONFIG] [--rounds N] [--steps N] [-- --set k=v ...]
# Default CONFIG: configs/quickstart.yaml; 3 rounds of 30 steps. Needs build/eco-train with MPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
config=configs/quickstart.yaml rounds=3 steps=30 extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "usage: scripts/dev/dp_bench.sh [CONFIG] [--rounds N] [--steps N] [-- --set k=v ...]" >&2; exit 2 ;;
    *) config=$1; shift ;;
  esac
done
[ -x build/eco-train ] || { echo "dp_bench.sh: build/eco-train not found: run scripts/build.sh" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "dp_bench.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
work=$(mktemp -d /tmp/eco-dp-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(--set train.max_steps="$steps" --set train.log_interval=1 --set train.eval_interval=0
  --set train.eval_batches=1 --set train.sample_tokens=0 --set train.checkpoint_interval=0
  "${extra[@]}")
tok_s() {  # RUN_DIR -> median tokens/s of the steps after the first 5
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > 5]
print(f"{statistics.median(tps):.1f}")
PY
}
ratios=()
for i in $(seq "$rounds"); do
  OMP_NUM_THREADS=2 build/eco-train "$config" "${common[@]}" --set train.threads=2 \
    --set train.grad_accum=2 --set train.out_dir="$work/one_$i" >"$work/one_$i.log" 2>&1 ||
    { cat "$work/one_$i.log"; exit 1; }
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none \
    build/eco-train "$config" "${common[@]}" --set train.threads=1 --set parallel.dp=2 \
    --set train.out_dir="$work/dp2_$i" >"$work/dp2_$i.log" 2>&1 || { cat "$work/dp2_$i.log"; exit 1; }
  one=$(tok_s "$work/one_$i") dp2=$(tok_s "$work/dp2_$i")
  r=$(python3 -c "print(f'{$dp2 / $one:.3f}')")
  ratios+=("$r")
  echo "round $i: 1 rank x 2 threads $one tokens/s, 2 ranks x 1 thread $dp2 tokens/s, ratio $r"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "dp_bench: $config, 2 ranks / 1 rank tokens/s, median of $rounds rounds: $median (target >= 0.9); load $(cut -d' ' -f1-3 /proc/loadavg)"
