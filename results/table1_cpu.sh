#!/usr/bin/env bash
# The ECO paper's Table 1 at our scale, on real text, on 2 CPU cores (one per size: the configs
# train on one thread each, and `both` runs the two sizes side by side): prepares LM1B's two
# heldout sections beside the checkout as 1024-token BPE shards (data/lm1b-all-bpe1024, git-ignored; a
# no-op when up to date), then trains the five treatments (bf16-mw, fp8-mw-rtn, fp8-naive-sr,
# fp8-eco-rtn, fp8-eco-sr) at two sizes, configs/table1/lm1b-s.yaml (213,568 non-embedding
# parameters, 20.1 tokens each) and lm1b-m.yaml (443,232, 20.3 tokens each), with
# scripts/reproduce.sh: resumable, results/table1-lm1b-{s,m}/summary.md beside the paper's 30M
# gaps. Extra arguments go to reproduce.sh's eco-train commands (e.g. -- --set train.threads=1).
#   results/table1_cpu.sh [s|m|both] [-- --set k=v ...]
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=(s m)
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  case $1 in s|m) sizes=("$1") ;; both) ;; *) echo "usage: results/table1_cpu.sh [s|m|both] [-- --set k=v ...]" >&2; exit 2 ;; esac
  shift
fi
lm1b=../shared/data/lm1b
for f in "$lm1b/1b_benchmark.dev.tokens" "$lm1b/1b_benchmark.test.tokens"; do
  [ -f "$f" ] || { echo "table1_cpu.sh: $f is absent (the LM1B sample beside the checkout, ../shared/data/README.md)" >&2; exit 2; }
done
python3 data/prepare.py --input "$lm1b/1b_benchmark.dev.tokens" "$lm1b/1b_benchmark.test.tokens" \
  --val-fraction 0.05 --format lines --out data/lm1b-all-bpe1024 --tokenizer bpe --vocab-size 1024
pids=()
for s in "${sizes[@]}"; do
  scripts/reproduce.sh configs/table1/lm1b-$s.yaml --name table1-lm1b-$s --paper 30m "$@" \
    > >(sed -u "s/^/[$s] /") 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
