#!/usr/bin/env bash
# Configures and builds ecotrain into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DECO_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
# Ninja when it is there (scripts/install_deps.sh installs it): its one schedule over every
# target keeps both cores busy where make's per-target order left one idle (a fresh build on 2
# cores: ~6 min against ~9). A build/ configured before keeps its generator.
gen=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >build.cmake.log 2>&1 || {
  cat build.cmake.log
  exit 1
}
cmake --build build -j"$(nproc)"
