#!/usr/bin/env bash
# data/prepare.py --workers: tokens/s on the C4 sample (c4/csci662_c4_sample.json, given COPIES
# times as --input, so the corpus is COPIES x 0.75 MB) with the T5 SentencePiece model, for each
# worker count, best of REPEATS runs, runs interleaved. Prints a table: workers, seconds (the
# encoding phase of the best run), wall and cpu (the whole command, CPU seconds of all its
# processes: the work, which a busy machine does not change much), tokens/s over the encoding
# phase, its ratio to the first count's, and whether the outputs are identical to the first
# count's (sha256 of every file; meta.json but for its timings). Not a test; run from the
# project root on a quiet machine:
#   scripts/dev/prepare_bench.sh [COPIES (default 100)] [REPEATS (default 3)] [WORKERS... (default 1 2)]
set -euo pipefail
COPIES=${1:-100}
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
    # prints: encoding seconds, tokens, wall seconds, CPU seconds (the command and its workers)
    python3 - "$WORK/out.$n" data/prepare.py --input "${inputs[@]}" --out "$WORK/out.$n" --force \
      --workers "$n" --tokenizer sentencepiece --tokenizer-model "$MODEL" >>"$WORK/times.$n" <<'PY' ||
import json, resource, subprocess, sys, time
start = time.time()
with open(sys.argv[1] + ".log", "w") as log:
    if subprocess.run([sys.executable] + sys.argv[2:], stdout=log, stderr=log).returncode:
        sys.exit(f"prepare_bench: prepare.py failed: {open(sys.argv[1] + '.log').read()}")
wall = time.time() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
meta = json.load(open(sys.argv[1] + "/meta.json"))
print(meta["seconds"]["encode"], sum(s["tokens"] for s in meta["splits"].values()), f"{wall:.3f}",
      f"{usage.ru_utime + usage.ru_stime:.3f}")
PY
      exit 1
  done
done
fingerprint "$WORK/out.${COUNTS[0]}" >"$WORK/sum.first"
printf '%-8s %-8s %-8s %-8s %-12s %-6s %s\n' workers seconds wall cpu tokens/s ratio identical
base=""
for n in "${COUNTS[@]}"; do
  read -r secs tokens wall cpu < <(sort -g "$WORK/times.$n" | head -1)
  rate=$(echo "$tokens / $secs" | bc)
  base=${base:-$rate}
  fingerprint "$WORK/out.$n" | cmp -s - "$WORK/sum.first" && same=yes || same=no
  printf '%-8s %-8.2f %-8.2f %-8.2f %-12s %-6.2f %s\n' "$n" "$secs" "$wall" "$cpu" "$rate" \
    "$(echo "$rate / $base" | bc -l)" "$same"
done
echo "prepare_bench: $tokens tokens; best of $REPEATS; load after $(cut -d' ' -f1-3 /proc/loadavg)"
