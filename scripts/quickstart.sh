#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, and trains configs/quickstart.yaml (a small GPT-2
# on the built-in synthetic corpus with a known entropy floor). Prints progress, the final val
# loss against the floor, and a generated sample. Extra arguments go to eco-train (--set k=v).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/eco-train configs/quickstart.yaml "$@"
