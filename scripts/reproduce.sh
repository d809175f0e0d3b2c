#!/usr/bin/env bash
# The ECO paper's Table 1 at a size and token budget of your choosing, on whatever device and
# world size you give it: the five treatments (bf16-mw, fp8-mw-rtn, fp8-naive-sr, fp8-eco-rtn,
# fp8-eco-sr) one after the other, resumable (a finished treatment is skipped, an interrupted one
# resumes from its checkpoint), then results/<name>/summary.md with our losses and gaps beside
# the paper's (sizes 30m, 100m, 800m), the loss curves and the memory-vs-loss figure.
#   scripts/reproduce.sh SIZE|CONFIG [--tokens N] [--device cpu|cuda] [--np N] [--name NAME]
#                        [--paper 30m|100m|800m] [-- --set key=value ...]
# SIZE: 30m 50m 100m 200m 430m 800m (configs/paper/llama-SIZE.yaml: the paper's 100 tokens per
# parameter on C4 shards in data/c4-t5, see the config's comment), or any config file.
# --tokens: the token budget (train.max_tokens), e.g. 2e8 for a short run.
# --paper: the paper's size to set beside the results (default: SIZE when it is 30m, 100m or 800m).
# --np N: N data-parallel ranks under mpirun (the global batch stays: grad_accum 16 / N).
# Example: scripts/reproduce.sh 30m --tokens 5e8 --device cuda --np 8
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/reproduce.sh SIZE|CONFIG [--tokens N] [--device cpu|cuda] [--np N] [--name NAME] [--paper 30m|100m|800m] [-- --set k=v ...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
what=$1
shift
tokens="" device="" np=1 name="" paper="" extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --paper) paper=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
  esac
done
paper_size=""
if [ -f "$what" ]; then
  config=$what
else
  config=configs/paper/llama-$what.yaml
  [ -f "$config" ] || { echo "reproduce.sh: no size '$what' (30m 50m 100m 200m 430m 800m) and no such config file" >&2; exit 2; }
  case $what in 30m|100m|800m) paper_size=$what ;; esac
fi
case $paper in ""|30m|100m|800m) ;; *) echo "reproduce.sh: --paper '$paper': the paper's Table 1 has 30m, 100m and 800m" >&2; exit 2 ;; esac
[ -n "$paper" ] && paper_size=$paper
sets=()
if [ -n "$tokens" ]; then
  t=$(python3 -c "import sys; v = float(sys.argv[1]); assert v >= 1; print(int(v))" "$tokens" 2>/dev/null) ||
    { echo "reproduce.sh: --tokens '$tokens' is not a positive number of tokens" >&2; exit 2; }
  sets+=(--set train.max_tokens="$t" --set train.max_steps=0)
fi
[ -n "$device" ] && sets+=(--set device="$device")
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "reproduce.sh: --np '$np' is not a positive integer" >&2; exit 2; }
if [ "$np" -gt 1 ]; then
  accum=$(sed -n 's/^  grad_accum: *\([0-9]*\).*/\1/p' "$config")
  accum=${accum:-1}
  [ $((accum % np)) -eq 0 ] || { echo "reproduce.sh: --np $np does not divide the config's grad_accum $accum (the global batch would change)" >&2; exit 2; }
  sets+=(--set parallel.dp="$np" --set train.grad_accum=$((accum / np)))
  export ECO_LAUNCH="mpirun -np $np --oversubscribe --bind-to none"
  [ "$(id -u)" = 0 ] && export ECO_LAUNCH="$ECO_LAUNCH --allow-run-as-root"
fi
export ECO_RUNS_NAME=${name:-reproduce-$(basename "$config" .yaml)${tokens:+-$tokens}}
export ECO_PAPER_SIZE=$paper_size
echo "reproduce.sh: $config -> runs/$ECO_RUNS_NAME, results/$ECO_RUNS_NAME (${np} rank(s)${device:+, $device})"
exec scripts/treatments.sh "$config" bf16-mw fp8-mw-rtn fp8-naive-sr fp8-eco-rtn fp8-eco-sr -- \
  ${sets[@]+"${sets[@]}"} ${extra[@]+"${extra[@]}"}
