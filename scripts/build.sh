#!/usr/bin/env bash
# Configures and builds ecotrain into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DECO_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build.cmake.log 2>&1 || {
  cat build.cmake.log
  exit 1
}
cmake --build build -j"$(nproc)"
