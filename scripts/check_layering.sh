#!/usr/bin/env bash
# The include layering (README.md, Architecture): fails, listing each offending #include, when
#   - a file under kernels/ includes a header of src/optim, src/train, src/data, src/cli or
#     src/quant (or any "src/..." path),
#   - a file under kernels/cpu or kernels/cuda includes src/model other than the backend interface
#     (model/backend.h), or kernels/common includes src/model at all,
#   - a file under kernels/ includes src/dist, but kernels/cuda the communicator interfaces
#     (dist/communicator.h, dist/device_communicator.h: the NCCL communicator implements them),
#   - a file under src/core includes another src/ folder,
#   - a file under src/model, src/core, src/quant, src/data or src/hf includes src/dist (the
#     model asks for its token exchange through model/expert_exchange.h, which src/dist
#     implements),
#   - a file under src/dist includes a src/ folder other than src/core and src/dist, but the
#     interfaces of src/model it builds on (model/backend.h, model/expert_exchange.h,
#     model/expert_parallel.h),
#   - a file under src/ (but src/cli, the program) includes kernels/cpu or kernels/cuda,
#   - a file under src/ outside src/dist calls a collective (all_reduce_*, reduce_scatter_sum,
#     all_gather, gather, broadcast, all_to_all_v, barrier): the run's parallel plan
#     (dist/parallel_plan.h) issues every collective.
# src/ is an include directory, so those headers appear as "optim/...", "quant/..." etc.
# Usage: scripts/check_layering.sh [SOURCE_DIR]   (default: the repository this script is in)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# Exceptions, each "FILE:#include ..." with its reason (none today).
allowed=()

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

check kernels '(src/|optim/|train/|data/|cli/|quant/)' 'kernels include only the backend interface, src/core and kernels/common'
check kernels/common 'model/' 'kernels/common is below the model'
for d in kernels/cpu kernels/cuda; do
  check "$d" 'model/' 'kernels may include only model/backend.h of src/model' '"model/backend\.h"'
done
check kernels/common 'dist/' 'kernels/common is below src/dist'
check kernels/cpu 'dist/' 'the CPU kernels use nothing of src/dist'
check kernels/cuda 'dist/' 'kernels/cuda may include only the communicator interfaces of src/dist' \
  '"dist/(device_)?communicator\.h"'
for d in src/core src/quant src/model src/optim src/data src/train src/hf; do
  check "$d" 'kernels/(cpu|cuda)/' 'the library reaches the backends only through model/backend.h'
done
check src/core '(src/|model/|optim/|train/|data/|cli/|quant/|dist/)' 'src/core includes no other src/ folder'
for d in src/model src/quant src/data src/hf; do
  check "$d" 'dist/' 'the model reaches the other ranks only through model/expert_exchange.h'
done
check src/dist '(src/|model/|optim/|train/|data/|cli/|quant/|hf/)' \
  'src/dist builds on src/core and the model interfaces (backend, expert_exchange, expert_parallel)' \
  '"model/(backend|expert_exchange|expert_parallel)\.h"'

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
