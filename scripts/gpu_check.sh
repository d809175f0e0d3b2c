#!/usr/bin/env bash
# One command for a GPU machine: builds for the GPU it finds, runs the GPU tests (each CUDA
# kernel against its CPU twin), the GPU benchmarks, and (once the CUDA backend trains) a short
# GPT-2 124M run; prints a summary table last. Full log in the directory given as argument.
#   scripts/gpu_check.sh LOG_DIR
# ECO_GPU_PREBUILT=DIR uses binaries built elsewhere (DIR/tests/eco_gpu_tests, DIR/eco-*-bench,
# shared libraries the GPU machine lacks in DIR/libs) instead of building here, for GPU machines
# without the build dependencies.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${1:?usage: scripts/gpu_check.sh LOG_DIR}
mkdir -p "$log_dir"
log=$log_dir/gpu_check.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
start=$(date +%s)

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "gpu_check: no GPU found (nvidia-smi); nothing to check"
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader | head -1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
arch=$cap
[ "$cap" = 90 ] && arch=90a
say "gpu_check: $gpu -> building for sm_$arch"

bin=build-gpu
if [ -n "${ECO_GPU_PREBUILT:-}" ]; then
  bin=$ECO_GPU_PREBUILT
  export LD_LIBRARY_PATH="$bin/libs:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  say "gpu_check: using prebuilt binaries in $bin"
else
  # Build only what the GPU run needs, for this GPU only (fast). install_deps.sh installs missing
  # dependencies when the machine can reach the package registries.
  scripts/install_deps.sh >>"$log" 2>&1 || say "gpu_check: install_deps failed (continuing)"
  if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DECO_CUDA=ON -DECO_CUDA_ARCHS="$arch" \
      >>"$log" 2>&1; then
    say "gpu_check: cmake failed (see $log)"; tail -20 "$log"; exit 1
  fi
  targets=(eco_gpu_tests eco-train)
  for t in eco-gemm-bench eco-update-bench; do
    grep -q "add_executable($t" CMakeLists.txt && targets+=("$t")
  done
  if ! cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >>"$log" 2>&1; then
    say "gpu_check: build failed (see $log)"; grep -E "error" "$log" | head -20; exit 1
  fi
  say "gpu_check: built ${targets[*]} in $(( $(date +%s) - start )) s"
fi

# GPU tests.
tests_xml=$log_dir/gpu_tests.xml
timeout 300 "$bin"/tests/eco_gpu_tests --gtest_output=xml:"$tests_xml" >"$log_dir/gpu_tests.log" 2>&1
tests_rc=$?
cat "$log_dir/gpu_tests.log" >>"$log"
passed=$(grep -c '^\[       OK \]' "$log_dir/gpu_tests.log")
failed=$(grep -c '^\[  FAILED  \].*(' "$log_dir/gpu_tests.log")
skipped=$(grep -c '^\[  SKIPPED \].*(' "$log_dir/gpu_tests.log")

# Benchmarks (each prints its own table; the last lines are collected below).
bench_out=$log_dir/benchmarks.log
: >"$bench_out"
for b in eco-gemm-bench eco-update-bench; do
  if [ -x "$bin/$b" ]; then
    echo "== $b" >>"$bench_out"
    timeout 120 "$bin/$b" >>"$bench_out" 2>&1 || echo "$b failed (exit $?)" >>"$bench_out"
  fi
done
cat "$bench_out" >>"$log"

# Training on the GPU: needs the CUDA backend (device: cuda).
train_note="skipped: the CUDA backend is not wired into eco-train yet"
if [ -x "$bin/eco-train" ] && "$bin"/eco-train configs/gpt2-124m-cpu-bench.yaml --plan --set device=cuda >/dev/null 2>&1; then
  train_note="(eco-train accepts device: cuda; add the training run here)"
fi

say ""
say "================ gpu_check summary ================"
say "GPU:            $gpu"
say "GPU tests:      $passed passed, $failed failed, $skipped skipped (exit $tests_rc)"
grep '^\[  FAILED  \].*(' "$log_dir/gpu_tests.log" | sed 's/^/  /' | tee -a "$log"
say "benchmarks:"
grep -E "^\|| GB/s|TFLOP/s|fraction" "$bench_out" | sed 's/^/  /' | tee -a "$log"
say "training:       $train_note"
say "wall time:      $(( $(date +%s) - start )) s; full log: $log"
[ "$tests_rc" = 0 ]
