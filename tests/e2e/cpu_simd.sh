# The CPU's vector quantized update (kernels/cpu/quantized_update_simd.h) trains to the scalar
# path's bits: 10 steps of fp8-eco-sr, int4-eco-rtn and fp8-mw-sr (SGDM for the last) under
# ECO_CPU_SIMD=scalar, avx2 and avx512 (each path this CPU runs) give equal final checkpoints.
# An unknown ECO_CPU_SIMD is refused with one line naming the variable and the valid values.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
[ -x "$CKPT" ] || fail "no eco-ckpt beside $ECO_TRAIN"
tiny_config >cfg.yaml
expect_error 2 "ECO_CPU_SIMD=sse9: expected scalar, avx2 or avx512" -- \
  env ECO_CPU_SIMD=sse9 timeout 60 "$ECO_TRAIN" cfg.yaml --set train.max_steps=1

paths=(scalar)
grep -qw avx2 /proc/cpuinfo && paths+=(avx2)
grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
  grep -qw avx512dq /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && paths+=(avx512)
[ ${#paths[@]} -gt 1 ] || { echo "SKIP: no AVX2 on this CPU: only the scalar path runs"; exit 77; }
common=(--set train.max_steps=10 --set train.sample_tokens=0 --set train.eval_interval=0)
declare -A treatments=(
  [fp8sr]="--set precision.treatment=fp8-eco-sr"
  [int4rtn]="--set precision.treatment=int4-eco-rtn"
  [sgdm]="--set precision.treatment=fp8-mw-sr --set optim.name=sgdm"
)
for t in fp8sr int4rtn sgdm; do
  read -ra extra <<<"${treatments[$t]}"
  for p in "${paths[@]}"; do
    ECO_CPU_SIMD=$p "$ECO_TRAIN" cfg.yaml "${common[@]}" "${extra[@]}" \
      --set train.out_dir="$WORK/${t}_$p" >"${t}_$p.log" 2>&1 ||
      { cat "${t}_$p.log"; fail "$t on the $p path failed"; }
  done
  for p in "${paths[@]:1}"; do
    same "${t}_scalar" "${t}_$p"
  done
done
