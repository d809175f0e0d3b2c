#!/usr/bin/env bash
# Builds, on a machine without a GPU, what scripts/dev/gpu_check.sh runs on a GPU machine that
# lacks the build dependencies: the GPU tests, eco-train and the GPU benchmarks for one
# architecture, plus the shared libraries they need beyond the C/C++ runtime and CUDA (which the
# GPU machine has), into one folder and OUT_DIR.tar.xz (both gitignored; the archive is what fits
# the device tool's 64 MiB carry).
#   scripts/dev/gpu_bundle.sh [OUT_DIR [ARCH]]        defaults: gpu-prebuilt 90a
# Then, on the GPU machine:
#   tar -xJf OUT_DIR.tar.xz && ECO_GPU_PREBUILT=OUT_DIR scripts/dev/gpu_check.sh LOG_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-prebuilt}
arch=${2:-90a}
build=build-bundle-$arch
targets=(eco_gpu_tests eco-train eco-ckpt eco-gemm-bench eco-update-bench)

# x86-64-v2: the GPU machine's CPU need not have this machine's vector extensions.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DECO_MARCH=x86-64-v2 -DECO_CUDA=ON \
  -DECO_CUDA_ARCHS="$arch" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/tests" "$out/libs"
cp "$build/tests/eco_gpu_tests" "$out/tests/"
for t in eco-train eco-ckpt eco-gemm-bench eco-update-bench; do cp "$build/$t" "$out/"; done

# Every resolved dependency except the C runtime, libstdc++/libgcc and the CUDA libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnccl|libnvToolsExt|libnvtx)'
for bin in "$out"/tests/eco_gpu_tests "$out"/eco-*; do
  ldd "$bin" | awk '$3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $skip ]]; then cp -L "$path" "$out/libs/$name"; fi
done
# Symbols are not needed to run; the device tool carries at most 64 MiB, so the folder also goes
# into one xz archive (OpenBLAS alone is ~36 MB unpacked).
strip --strip-unneeded "$out"/tests/eco_gpu_tests "$out"/eco-* "$out"/libs/* 2>/dev/null || true
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
echo "gpu_bundle: $out for sm_$arch ($(du -sh "$out" | cut -f1); $out.tar.xz $(du -sh "$out.tar.xz" | cut -f1)): $(ls "$out/libs" | tr '\n' ' ')"
echo "run on the GPU machine: ECO_GPU_PREBUILT=$out scripts/dev/gpu_check.sh LOG_DIR"
echo "  (from the archive: tar -xJf $out.tar.xz && ECO_GPU_PREBUILT=$out scripts/dev/gpu_check.sh LOG_DIR)"
