#!/usr/bin/env bash
# The ECO paper's dense sizes (configs/paper/llama-*.yaml) planned under each Table 1 treatment:
# parameters (the named count is the one outside the embeddings), tokens and steps, static memory
# (weights, codes, scales, masters, moments), the whole plan on one GPU at the configs'
# micro-batch (32 x 512) and whether it fits one H200 (139 GiB usable). A markdown table on
# stdout; no GPU needed (`--plan` uses the CUDA layout of device: cuda).
#   scripts/paper_plan.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/eco-train
[ -x "$bin" ] || { echo "paper_plan.sh: $bin not found: run scripts/build.sh" >&2; exit 2; }
h200_gib=139
treatments=(bf16-mw fp8-mw-rtn fp8-naive-sr fp8-eco-rtn fp8-eco-sr)
printf '| size | params (named / total) | tokens | steps |'
for t in "${treatments[@]}"; do printf ' %s static GiB |' "$t"; done
printf ' plan GiB (bf16-mw / fp8-eco-sr) | one H200 |\n|---|---|---|---|'
for _ in "${treatments[@]}"; do printf -- '---|'; done
printf -- '---|---|\n'
for cfg in configs/paper/llama-30m.yaml configs/paper/llama-50m.yaml configs/paper/llama-100m.yaml \
  configs/paper/llama-200m.yaml configs/paper/llama-430m.yaml configs/paper/llama-800m.yaml; do
  name=$(basename "$cfg" .yaml)
  row="" plan_first="" plan_last="" fits=yes
  for t in "${treatments[@]}"; do
    out=$("$bin" "$cfg" --set precision.treatment="$t" --plan 2>&1) || { echo "$out" >&2; exit 1; }
    read -r total named tokens steps static_b needed_gib < <(python3 - "$out" <<'PY'
import re, sys
s = sys.argv[1]
total = re.search(r"^total\s+(\d+)\s", s, re.M).group(1)
m = re.search(r"^training: (\d+) steps x \d+ tokens = (\S+) tokens .*outside the embeddings: (\d+)\)", s, re.M)
static = re.search(r"^static\s+(\d+)\s", s, re.M).group(1)
need = re.search(r"the plan needs ([\d.]+) GiB", s).group(1)
print(total, m.group(3), m.group(2), m.group(1), static, need)
PY
)
    row+=" $(python3 -c "print(f'{$static_b / 2**30:.2f}')") |"
    [ -z "$plan_first" ] && plan_first=$needed_gib
    plan_last=$needed_gib
    python3 -c "import sys; sys.exit(0 if $needed_gib <= $h200_gib else 1)" || fits=no
  done
  printf '| %s | %s / %s | %s | %s |%s %s / %s | %s |\n' "$name" "$(python3 -c "print(f'{$named/1e6:.1f}M')")" \
    "$(python3 -c "print(f'{$total/1e6:.1f}M')")" "$tokens" "$steps" "$row" "$plan_first" "$plan_last" "$fits"
done
