#!/usr/bin/env bash
# Quickstart: installs what is missing, builds eco-train alone (CPU backend, no tests: the config
# runs on device: cpu) into build-quickstart/, and trains configs/quickstart.yaml (a small GPT-2 on
# the built-in synthetic corpus with a known entropy floor). Prints progress, the final val loss
# against the floor, and a generated sample. Extra arguments go to eco-train (--set k=v).
# Its own build folder, so that build/ (scripts/build.sh, scripts/test.sh: everything, CUDA too
# when nvcc is present) keeps its own configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
build=build-quickstart
echo "quickstart: building eco-train (CPU only) into $build/"
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DECO_CUDA=OFF -DECO_BUILD_TESTS=OFF \
  >"$build/cmake.log" 2>&1 || {
  cat "$build/cmake.log"
  exit 1
}
cmake --build "$build" -j"$(nproc)" --target eco-train
# A rerun starts over (--overwrite) unless the arguments ask to resume.
fresh=(--overwrite)
for a in "$@"; do [[ $a == --resume* ]] && fresh=(); done
exec "$build/eco-train" configs/quickstart.yaml "${fresh[@]}" "$@"
