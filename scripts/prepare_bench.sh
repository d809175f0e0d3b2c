#!/usr/bin/env bash
# data/prepare.py --workers: tokens/s on the C4 sample (c4/csci662_c4_sample.json, given COPIES
# times as --input, so the corpus is COPIES x 0.75 MB) with the T5 SentencePiece model, for each
# worker count, best of REPEATS runs, runs interleaved. Prints a table: workers, seconds (the
# encoding phase, best run; wall = the whole command), tokens/s, ratio to the first count, and
# whether the outputs are identical to the first count's (sha256 of every file; meta.json but
# for its timings). Not a test; run from the project root on a quiet machine:
#   scripts/prepare_bench.sh [COPIES (default 40)] [REPEATS (default 3)] [WORKERS... (default 1 2)]
set -euo pipefail
COPIES=${1:-40}
REPEATS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
COUNTS=(1 2)
[ $# -eq 0 ] || COUNTS=("$@")
DATA=${ECO_SHARED_DATA:-$(pwd)/../shared/data}
C4=$DATA/c4/csci662_c4_sample.json
MODEL=$DATA/tokenizers/t5/spiece.model
for f in "$C4" "$MODEL"; do
  [ -s "$f" ] || { echo "prepare_bench: $f not found (set ECO_SHARED_DATA)" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/prepare-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
inputs=()
for _ in $(seq "$COPIES"); do inputs+=("$C4"); done

fingerprint() {
  (cd "$1" && sha256sum $(ls | grep -v '^meta.json$') &&
    python3 -c 'import json; m = json.load(open("meta.json")); m.pop("seconds"); print(json.dumps(m, sort_keys=True))')
}

echo "prepare_bench: $COPIES x $(du -h "$C4" | cut -f1) C4 sample, T5 SentencePiece, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
for r in $(seq "$REPEATS"); do
  for n in "${COUNTS[@]}"; do
    start=$(date +%s.%N)
    python3 data/prepare.py --input "${inputs[@]}" --out "$WORK/out.$n" --force --workers "$n" \
      --tokenizer sentencepiece --tokenizer-model "$MODEL" >"$WORK/log.$n" 2>&1 ||
      { cat "$WORK/log.$n"; exit 1; }
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["seconds"]["encode"],
      sum(s["tokens"] for s in m["splits"].values()), sys.argv[2])' "$WORK/out.$n/meta.json" "$wall" \
      >>"$WORK/times.$n"
  done
done
fingerprint "$WORK/out.${COUNTS[0]}" >"$WORK/sum.first"
printf '%-8s %-9s %-8s %-12s %-6s %s\n' workers seconds wall tokens/s ratio identical
base=""
for n in "${COUNTS[@]}"; do
  read -r secs tokens wall < <(sort -g "$WORK/times.$n" | head -1)
  rate=$(echo "$tokens / $secs" | bc)
  base=${base:-$rate}
  fingerprint "$WORK/out.$n" | cmp -s - "$WORK/sum.first" && same=yes || same=no
  printf '%-8s %-9.2f %-8.2f %-12s %-6.2f %s\n' "$n" "$secs" "$wall" "$rate" "$(echo "$rate / $base" | bc -l)" "$same"
done
echo "prepare_bench: $tokens tokens; best of $REPEATS; load after $(cut -d' ' -f1-3 /proc/loadavg)"
