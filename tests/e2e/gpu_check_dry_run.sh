# scripts/dev/gpu_check.sh from start to summary on a machine without a GPU, so that the one script
# that needs a GPU does not first fail on one: a stand-in nvidia-smi reports an H200, the build
# directory serves as ECO_GPU_PREBUILT (the same layout: tests/eco_gpu_tests, eco-train,
# eco-*-bench). Every GPU test must report itself skipped, each benchmark and training run must
# fail with its reason in the summary, and the script must exit non-zero. Skipped (77) in builds
# without the CUDA backend and on machines with a GPU.
source "$(dirname "$0")/lib/common.bash"
BIN=$(cd "$(dirname "$ECO_TRAIN")" && pwd)
if [ ! -x "$BIN/tests/eco_gpu_tests" ]; then
  echo "SKIPPED: no CUDA build (no $BIN/tests/eco_gpu_tests)"
  exit 77
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: a GPU is present; run scripts/dev/gpu_check.sh itself"
  exit 77
fi
mkdir -p "$WORK/bin"
cat >"$WORK/bin/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (stand-in)" ;;
  *name,compute_cap,memory.total*) echo "NVIDIA H200 (stand-in), 9.0, 143771 MiB" ;;
  *compute_cap*) echo "9.0" ;;
  *-lms*) while sleep 0.1; do echo 600; done ;;
  *memory.used*) echo 500 ;;
esac
SMI
chmod +x "$WORK/bin/nvidia-smi"
cd "$SRC"
rc=0
PATH="$WORK/bin:$PATH" ECO_GPU_PREBUILT="$BIN" scripts/dev/gpu_check.sh "$WORK/log" >"$WORK/out" 2>&1 ||
  rc=$?
cat "$WORK/out"
[ "$rc" != 0 ] || fail "gpu_check exited 0 with no GPU"
grep -q "================ gpu_check summary" "$WORK/out" || fail "no summary"
line=$(grep "^GPU tests:" "$WORK/out") || fail "no GPU test line"
[[ "$line" =~ ([0-9]+)\ passed,\ 0\ failed,\ ([0-9]+)\ skipped ]] || fail "GPU tests: $line"
[ "${BASH_REMATCH[2]}" -ge 80 ] || fail "only ${BASH_REMATCH[2]} GPU tests skipped: $line"
[ -s "$WORK/log/gpu_tests.xml" ] || fail "no gpu_tests.xml in the log directory"
for b in eco-gemm-bench eco-update-bench; do
  grep -q "^  $b failed (exit" "$WORK/out" || fail "$b's failure not in the summary"
done
for t in bf16-mw bf16-mw-mma fp8-eco-sr; do
  grep -qE "^  $t +exit 2: no run output .*no CUDA GPU is visible" "$WORK/out" ||
    fail "training row $t does not say why it failed"
done
grep -q "B 64 x T 1024, 20 steps" "$WORK/out" || fail "training setting not reported"
grep -qE "^mma attention: +[0-9]+ of its tests skipped \(no GPU\): keep auto on the GEMM path" \
  "$WORK/out" || fail "no verdict on the mma attention"
grep -q "^wall time:" "$WORK/out" || fail "no wall time"
[ -s "$WORK/log/gpu_check.log" ] || fail "no gpu_check.log"
echo "gpu_check dry run ok"
