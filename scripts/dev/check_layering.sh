#!/usr/bin/env bash
# The include floors (docs/architecture.md), lowest first:
#   src/base/math   the host/device math both backends share (ECO_HD): includes only itself
#   src/base        the value types (Tensor, QTensor, Treatment, MemoryLedger, errors) and the
#                   backend interface: includes only src/base
#   kernels/cpu, kernels/cuda   the two backends: include only src/base from src/ (kernels/cuda
#                   also the communicator interfaces of src/dist, which its NCCL communicator
#                   implements)
#   src/core        config, files: includes only src/base and itself
#   src/quant, src/model, src/optim, src/data, src/dist, src/hf, src/train: the library; it
#                   reaches the backends only through src/base/backend.h and its family
#                   headers src/base/backend_*.h (never kernels/)
#   src/cli         the program: may include anything
# Within the library: src/model, src/quant, src/data and src/hf include nothing of src/dist (the
# model asks for its token exchange through model/expert_exchange.h, which src/dist implements);
# src/dist builds on src/base, src/core and the model interfaces model/expert_exchange.h and
# model/expert_parallel.h. And no file under src/ outside src/dist calls a collective
# (all_reduce_*, reduce_scatter_sum, all_gather, gather, broadcast, all_to_all_v, barrier): the
# run's parallel plan (dist/parallel_plan.h) issues every collective.
# Fails, listing each offending #include. src/ is an include directory, so its headers appear
# as "base/...", "core/..." etc.
# Usage: scripts/dev/check_layering.sh [SOURCE_DIR]   (default: the repository this script is in)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# Exceptions, each "FILE:#include ..." with its reason.
allowed=(
  # --plan sizes a CUDA run's workspaces and attention path on any machine, with the CUDA
  # backend's plain-C++ planner.
  'kernels/cpu/planning_backend.cpp:#include "kernels/cuda/workspace_plan.h"'
  'kernels/cpu/planning_backend.cpp:#include "kernels/cuda/cuda_attention.h"'
)

violations=()
check() {  # check DIR INCLUDE_REGEX WHY [EXCEPT_REGEX]: #include "<INCLUDE_REGEX>..." under DIR
  local dir=$1 pattern=$2 why=$3 except=${4:-}
  [[ -d $dir ]] || return 0
  while IFS= read -r hit; do
    local file=${hit%%:*} rest=${hit#*:}
    local line=${rest%%:*} text=${rest#*:}
    local key="$file:$(echo "$text" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')"
    local ok=0
    [[ -n $except && $text =~ $except ]] && ok=1
    for a in ${allowed[@]+"${allowed[@]}"}; do [[ $key == "$a" ]] && ok=1; done
    ((ok)) || violations+=("$file:$line: $text  ($why)")
  done < <(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
             "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"$pattern" "$dir" || true)
}

above_base='(src/|core/|model/|optim/|train/|data/|cli/|quant/|dist/|hf/|kernels/)'
check src/base/math "($above_base|base/[a-z_]+\\.h)" 'src/base/math includes only src/base/math'
check src/base "$above_base" 'src/base includes only src/base'
check kernels/cpu '(src/|core/|model/|optim/|train/|data/|cli/|quant/|dist/|hf/|kernels/cuda/)' \
  'the CPU backend includes only src/base and kernels/cpu'
check kernels/cuda '(src/|core/|model/|optim/|train/|data/|cli/|quant/|dist/|hf/|kernels/cpu/)' \
  'the CUDA backend includes only src/base, kernels/cuda and the communicator interfaces' \
  '"dist/(device_)?communicator\.h"'
check src/core '(src/|model/|optim/|train/|data/|cli/|quant/|dist/|hf/|kernels/)' \
  'src/core includes only src/base and src/core'
for d in src/quant src/model src/optim src/data src/dist src/hf src/train; do
  check "$d" 'kernels/' 'the library reaches the backends only through base/backend.h'
done
for d in src/model src/quant src/data src/hf; do
  check "$d" 'dist/' 'the model reaches the other ranks only through model/expert_exchange.h'
done
check src/dist '(src/|model/|optim/|train/|data/|cli/|quant/|hf/|kernels/)' \
  'src/dist builds on src/base, src/core and the model interfaces (expert_exchange, expert_parallel)' \
  '"model/(expert_exchange|expert_parallel)\.h"'

while IFS= read -r hit; do
  violations+=("$hit  (collectives are issued from src/dist only: dist/parallel_plan.h)")
done < <(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' \
           '(\.|->)(all_reduce_sum|all_reduce_max|reduce_scatter_sum|all_gather|gather|broadcast|all_to_all_v|barrier)\(' \
           src --exclude-dir=dist | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)

if ((${#violations[@]})); then
  printf 'layering violation: %s\n' "${violations[@]}" >&2
  echo "check_layering: ${#violations[@]} violation(s)" >&2
  exit 1
fi
echo "check_layering: ok"
