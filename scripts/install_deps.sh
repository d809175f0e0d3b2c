#!/usr/bin/env bash
# Installs what ecotrain needs and is missing: Debian packages (build tools (Ninja too), yaml-cpp, spdlog,
# GoogleTest, OpenBLAS (OpenMP build), OpenMPI, nlohmann-json, zlib; GNU time for the tests' peak
# memory) and the Python packages used for data preparation (sentencepiece: the T5 tokenizer) and
# plots. Safe to run repeatedly: it only installs what is absent.
set -euo pipefail

APT_PACKAGES=(cmake g++ make ninja-build pkg-config libyaml-cpp-dev libspdlog-dev libfmt-dev libgtest-dev
  libopenblas-openmp-dev libopenmpi-dev openmpi-bin nlohmann-json3-dev zlib1g-dev python3
  python3-pip time)
PIP_PACKAGES=(numpy tokenizers tiktoken sentencepiece matplotlib)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pip_missing=()
for p in "${PIP_PACKAGES[@]}"; do
  $PY -c "import $p" >/dev/null 2>&1 || pip_missing+=("$p")
done
if ((${#pip_missing[@]})); then
  echo "install_deps: installing Python packages: ${pip_missing[*]}"
  $PY -m pip install -q "${pip_missing[@]}" 2>/dev/null ||
    $PY -m pip install -q --break-system-packages "${pip_missing[@]}"
fi
