#!/usr/bin/env bash
# The paper's INT4 fine-tune of DeepSeek-MoE-16B (configs/deepseek-moe-16b.yaml) planned under
# each treatment: static memory (weights, codes, scales, masters, moments) on one GPU, then what
# one GPU holds on N data-parallel ranks with ZeRO-1 (--set parallel.dp=N --set parallel.zero=1,
# grad_accum 16 / N: the global batch of 16 sequences stays), and the fewest H200s that hold it
# (139 GiB usable of the 141 GB: --plan cannot read a GPU's memory on a machine without one).
# ZeRO-1 divides the moments only: the fp32 gradients (with grad_accum > 1 their accumulator too)
# and the masters of the *-mw treatments stay whole on every rank. Then the same under expert
# parallelism: ep N ranks (the 64 routed experts split N ways: their weights, masters, gradients
# and moments), ZeRO-1 for the rest, micro-batch 16 / N and no accumulation (the same global
# batch; one micro-batch a step lets each owner keep one running sum of its experts' gradients),
# the expert rows sized for parallel.ep_row_factor 2 (twice the balanced load; a step that routes
# more grows them). Two markdown tables on stdout (GiB per GPU); no GPU needed.
#   scripts/finetune_plan.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/eco-train
[ -x "$bin" ] || { echo "finetune_plan.sh: $bin not found: run scripts/build.sh" >&2; exit 2; }
config=configs/deepseek-moe-16b.yaml
h200_gib=139
ranks=(1 2 4 8 16)
# treatment | extra --set | label
rows=("bf16-mw||bf16-mw" "int4-mw-rtn||int4-mw-rtn / -sr" "int4-naive-rtn||int4-naive-rtn / -sr"
  "int4-eco-sr||int4-eco-rtn / -sr" "int4-eco-sr|optim.state_dtype=bf16|int4-eco-*, bf16 moments")
plan() {  # treatment, extra set, ranks[, ep] -> "static_GiB grads_GiB needed_GiB B_per_quantized_param"
  local sets=(--set precision.treatment="$1" --set parallel.dp="$3" --set train.grad_accum=$((16 / $3)))
  [ "${4:-}" = ep ] && sets=(--set precision.treatment="$1" --set parallel.ep="$3"
    --set train.grad_accum=1 --set train.batch_size=$((16 / $3)) --set parallel.ep_row_factor=2)
  [ "$3" -gt 1 ] && sets+=(--set parallel.zero=1)
  [ -n "$2" ] && sets+=(--set "$2")
  local out
  out=$("$bin" "$config" "${sets[@]}" --plan 2>&1) || { echo "$out" >&2; exit 1; }
  python3 - "$out" <<'PY'
import re, sys
s = sys.argv[1]
static = int(re.search(r"^static\s+(\d+)\s", s, re.M).group(1))
grads = int(re.search(r"^grads\s+(\d+)\s", s, re.M).group(1))
need = float(re.search(r"the plan needs ([\d.]+) GiB", s).group(1))
bpq = re.search(r"^static bytes per quantized parameter: ([\d.]+)", s, re.M).group(1)
print(f"{static / 2**30:.1f} {grads / 2**30:.1f} {need:.1f} {bpq}")
PY
}
printf '| treatment | static B / quantized param | static GiB, 1 GPU |'
for n in "${ranks[@]}"; do printf ' GiB per GPU, %s |' "$([ "$n" = 1 ] && echo "1 GPU" || echo "$n x ZeRO-1")"; done
printf ' fewest H200s |\n|---|---|---|'
for _ in "${ranks[@]}"; do printf -- '---|'; done
printf -- '---|\n'
for r in "${rows[@]}"; do
  IFS='|' read -r t set label <<<"$r"
  line="" fewest="more than ${ranks[-1]}"
  read -r static1 _ _ bpq < <(plan "$t" "$set" 1)
  for n in "${ranks[@]}"; do
    read -r _ grads need _ < <(plan "$t" "$set" "$n")
    line+=" $need (grads $grads) |"
    if [[ $fewest == more* ]] && python3 -c "import sys; sys.exit(0 if $need <= $h200_gib else 1)"; then
      fewest=$n
    fi
  done
  printf '| %s | %s | %s |%s %s |\n' "$label" "$bpq" "$static1" "$line" "$fewest"
done

# Expert parallelism (ep N, dp 1, ZeRO-1, micro-batch 16 / N).
ep_ranks=(2 4 8 16)
printf '\n| treatment |'
for n in "${ep_ranks[@]}"; do printf ' GiB per GPU, ep %s |' "$n"; done
printf ' fewest H200s |\n|---|'
for _ in "${ep_ranks[@]}"; do printf -- '---|'; done
printf -- '---|\n'
for r in "${rows[@]}"; do
  IFS='|' read -r t set label <<<"$r"
  line="" fewest="more than ${ep_ranks[-1]}"
  for n in "${ep_ranks[@]}"; do
    read -r _ grads need _ < <(plan "$t" "$set" "$n" ep)
    line+=" $need (grads $grads) |"
    if [[ $fewest == more* ]] && python3 -c "import sys; sys.exit(0 if $need <= $h200_gib else 1)"; then
      fewest=$n
    fi
  done
  printf '| %s |%s %s |\n' "$label" "$line" "$fewest"
done
