#!/usr/bin/env bash
# The SMoE treatments on LM1B (configs/smoe-lm1b-cpu.yaml): prepares the 4096-token BPE shards
# from ../shared/data/lm1b/ into data/lm1b-bpe4k/ (git-ignored; a no-op when up to date), trains
# six treatments (bf16-mw and five FP8 ones) with scripts/treatments.sh (resumable; extra
# arguments go to eco-train, e.g. --set train.threads=1) and writes results/smoe-lm1b-cpu/: the
# summary table and plots, plus moe_load_<treatment>.png (expert load, router entropy, aux and
# z loss over training) for bf16-mw and fp8-eco-sr.
set -euo pipefail
cd "$(dirname "$0")/.."
lm1b=../shared/data/lm1b
python3 data/prepare.py --input $lm1b/1b_benchmark.dev.tokens --val-input $lm1b/1b_benchmark.test.tokens \
  --format lines --out data/lm1b-bpe4k --tokenizer bpe --vocab-size 4096
scripts/treatments.sh configs/smoe-lm1b-cpu.yaml bf16-mw fp8-mw-rtn fp8-naive-rtn fp8-naive-sr \
  fp8-eco-rtn fp8-eco-sr -- "$@"
for t in bf16-mw fp8-eco-sr; do
  python3 scripts/plot_moe_load.py runs/smoe-lm1b-cpu/$t --out results/smoe-lm1b-cpu/moe_load_$t.png \
    --title "smoe-lm1b-cpu $t: expert load (4 layers x 8 experts, top-2)"
done
