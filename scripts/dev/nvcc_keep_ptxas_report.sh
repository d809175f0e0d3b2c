#!/usr/bin/env bash
# The CUDA library's compiler launcher (CMake CUDA_COMPILER_LAUNCHER): runs the nvcc command line
# it is given (compiled with --resource-usage) and keeps ptxas's per-kernel report of object OBJ
# in OBJ.ptxas.txt, where scripts/dev/kernel_resources.sh reads it: the check then costs no second
# compilation. Everything but ptxas's resource lines still reaches the build log (warnings are
# errors under -Werror, so they must stay visible).
set -uo pipefail
obj=""
prev=""
for arg in "$@"; do
  [[ "$prev" == "-o" ]] && obj="$arg"
  prev="$arg"
done
log="$(mktemp)"
"$@" 2>"$log"
rc=$?
# ptxas's report: "ptxas info : ..." lines and their indented "N bytes stack frame, ..." lines.
grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2
if [[ -n "$obj" && $rc -eq 0 ]]; then
  mv "$log" "$obj.ptxas.txt"
else
  rm -f "$log"
fi
exit $rc
