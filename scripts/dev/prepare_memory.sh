#!/usr/bin/env bash
# Measures data/prepare.py's peak memory (max RSS) on a synthetic text corpus of SIZE_MB (default
# 1024, i.e. 1 GiB) that it writes to /tmp and deletes afterwards (the target: under 500 MB).
# Not a test (it takes minutes); run from the project root:
#   scripts/dev/prepare_memory.sh [TOKENIZER (default sentencepiece, the T5 model)] [SIZE_MB]
# The corpus: paragraphs of 1-12 lines of random words (a Zipf-like vocabulary of 50,000), a 16 MiB
# block repeated; the tokenizers keep no state that grows with the input, so repeats are fair.
set -euo pipefail
TOKENIZER=${1:-sentencepiece}
SIZE_MB=${2:-1024}
DATA=${ECO_SHARED_DATA:-$(pwd)/../shared/data}
case $TOKENIZER in
  sentencepiece) ARGS=(--tokenizer sentencepiece --tokenizer-model "$DATA/tokenizers/t5/spiece.model") ;;
  hf) ARGS=(--tokenizer hf --tokenizer-model "$DATA/tokenizers/t5/tokenizer.json") ;;
  gpt2) ARGS=(--tokenizer gpt2 --tokenizer-model "$DATA/tokenizers/gpt2") ;;
  bpe) ARGS=(--tokenizer bpe --vocab-size 4096) ;;
  bytes) ARGS=(--tokenizer bytes) ;;
  *) echo "prepare_memory: unknown tokenizer $TOKENIZER" >&2; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/prepare-memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

python3 - "$WORK/corpus.txt" "$SIZE_MB" <<'PY'
import random, sys
rng = random.Random(0)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 10))) for _ in range(50_000)]
cum, total = [], 0.0
for r in range(len(words)):
    total += 1.0 / (r + 1)
    cum.append(total)
parts, size = [], 0
while size < 16 << 20:
    lines = []
    for _ in range(rng.randint(1, 12)):
        line = " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(4, 30)))
        lines.append(line[0].upper() + line[1:] + ".\n")
    parts.append("".join(lines) + "\n")
    size += len(parts[-1])
block = "".join(parts).encode()
with open(sys.argv[1], "wb") as f:
    for _ in range(-(-int(sys.argv[2]) * (1 << 20) // len(block))):
        f.write(block)
PY
echo "prepare_memory: $(du -h "$WORK/corpus.txt" | cut -f1) corpus, --tokenizer $TOKENIZER"
/usr/bin/time -v python3 data/prepare.py --input "$WORK/corpus.txt" --out "$WORK/out" "${ARGS[@]}" \
  2>"$WORK/time.log" | tail -3 || { cat "$WORK/time.log"; exit 1; }
grep -E "Maximum resident|Elapsed" "$WORK/time.log"
rss_kb=$(awk '/Maximum resident/ {print $NF}' "$WORK/time.log")
echo "prepare_memory: peak RSS $((rss_kb / 1024)) MiB (target < 500 MB)"
