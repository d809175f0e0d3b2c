#!/usr/bin/env bash
# Reproduces nanoGPT's CPU character-level Shakespeare recipe (configs/shakespeare-char-cpu.yaml):
# prepares byte-level shards from ../shared/data/tinyshakespeare.txt, trains, and writes
# results/shakespeare-char-cpu/ (metrics, summary, sample, loss.png). Extra args go to eco-train.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
python3 data/prepare.py --input ../shared/data/tinyshakespeare.txt --out data/shakespeare-char --tokenizer bytes
rm -rf runs/shakespeare-char-cpu
build/eco-train configs/shakespeare-char-cpu.yaml "$@"
out=results/shakespeare-char-cpu
mkdir -p "$out"
cp runs/shakespeare-char-cpu/{metrics.jsonl,summary.json,config.resolved.yaml,samples.txt} "$out/"
python3 scripts/plot_metrics.py runs/shakespeare-char-cpu --out "$out/loss.png" \
  --title "shakespeare-char-cpu (gpt2 4L d128, 2000 steps)" --hline "1.88:nanoGPT 1.88"
