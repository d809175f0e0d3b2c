#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds (CUDA sources too when nvcc is present),
# and runs every test with ctest. GPU tests report themselves skipped on machines without a GPU.
# The emulator's exhaustive sweeps (ctest label `exhaustive`, tests/emu/README.md) and the
# sanitizer run of the bad-input tests (label `sanitize`, scripts/sanitize_check.sh) are left out:
# run them on demand with `cd build && ctest -L exhaustive` or `ctest -L sanitize`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh "$@"
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE 'exhaustive|sanitize'
