#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds (CUDA sources too when nvcc is present),
# and runs every test with ctest. GPU tests report themselves skipped on machines without a GPU.
# The emulator's exhaustive sweeps (label `exhaustive`, tests/emu/README.md) run too. Left out:
# tests/gpu's 20-step training tests through the emulated CUDA backend (label `slow`, ~4 min)
# and the sanitizer run of the bad-input tests (label `sanitize`, scripts/dev/sanitize_check.sh):
# run them on demand with `cd build && ctest -L slow` or `ctest -L sanitize`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh "$@"
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE 'slow|sanitize'
