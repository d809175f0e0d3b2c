#!/usr/bin/env bash
# The include layering (docs/architecture.md): fails, listing each offending #include, when
#   - a file under kernels/ includes a header of src/optim, src/train, src/data, src/cli or
#     src/quant (or any "src/..." path),
#   - a file under kernels/cpu or kernels/cuda includes src/model other than the backend interface
#     (model/backend.h), or kernels/common includes src/model at all,
#   - a file under kernels/ includes src/dist, but kernels/cuda the communicator interfaces
#     (dist/communicator.h, dist/device_communicator.h: the NCCL communicator implements them),
#   - a file under src/core includes another src/ folder,
#   - a file under src/ (but src/cli, the program) includes kernels/cpu or kernels/cuda.
# src/ is an include directory, so those headers appear as "optim/...", "quant/..." etc.
# Usage: scripts/dev/check_layering.sh [SOURCE_DIR]   (default: the repository this script is in)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# Exceptions, each "FILE:#include ..." with its reason (none).
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

if ((${#violations[@]})); then
  printf 'layering violation: %s\n' "${violations[@]}" >&2
  echo "check_layering: ${#violations[@]} violation(s)" >&2
  exit 1
fi
echo "check_layering: ok"
