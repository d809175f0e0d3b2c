# data/prepare.py --workers: 0, -1, x, 1.5 and more than 4 x the cores are refused (exit 2, naming
# the value and what is expected); on generated JSON lines with the bytes tokenizer, 1, 2 and auto
# (one process for this small input) write the same shards, and a document that is not text (a
# lone surrogate) in a later batch gives the same one-line error, exit 3, with 1, 2 and 3 workers.
# Needs numpy only (skipped, exit 77, without it).
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "SKIP: prepare_workers_usage: the Python module 'numpy' is needed"
  exit 77
fi
python3 - <<'PY'
import json, random
rng = random.Random(0)
rows = [" ".join(rng.choice(["alpha", "beta", "gamma", "delta", "épsilon"]) for _ in range(rng.randint(5, 400)))
        for _ in range(3000)]  # about 2.4 MB: ten batches of 256 KiB
with open("docs.jsonl", "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in rows)
with open("bad.jsonl", "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in rows[:2500])
    f.write('{"text": "x \\udfff y"}\n')
    f.writelines(json.dumps({"text": t}) + "\n" for t in rows[2500:])
PY
prepare() { python3 "$SRC/data/prepare.py" --input docs.jsonl --tokenizer bytes "$@"; }

most=$((4 * $(nproc --all)))
for value in 0 -1 x 1.5 "" $((most + 1)); do
  rc=0
  out=$(prepare --out bad --workers "$value" 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "--workers '$value': exit $rc, expected 2: $out"
  grep -qE -- "prepare.py: error: --workers ('$value'|$value)[: ].*(in \[1, $most\]).*auto" <<<"$out" ||
    fail "--workers '$value': unclear message: $out"
  [ ! -e bad ] || fail "--workers '$value' wrote output"
  echo "ok: --workers '$value': exit 2: $(tail -1 <<<"$out")"
done

for n in 1 2 auto; do
  prepare --out "out.$n" --workers "$n" --shard-tokens 500000 >"out.$n.log" 2>&1 ||
    { cat "out.$n.log"; fail "--workers $n failed"; }
done
for n in 2 auto; do
  for f in out.1/*.bin; do
    cmp -s "$f" "out.$n/$(basename "$f")" || fail "--workers $n: $(basename "$f") differs from --workers 1"
  done
  [ "$(ls out.1)" = "$(ls "out.$n")" ] || fail "--workers $n wrote other files: $(ls "out.$n")"
done
grep -q "on 2 workers" out.2.log || fail "--workers 2 not reported: $(tail -1 out.2.log)"
grep -q "on 1 worker)" out.auto.log || fail "auto started workers for 2.4 MB: $(tail -1 out.auto.log)"
echo "ok: --workers 1, 2, auto: the same $(ls out.1/*.bin | wc -l) shards"

for n in 1 2 3; do
  expect_error 3 "bad.jsonl:2501: the bytes tokenizer cannot encode this document: it holds the lone surrogate U+DFFF" -- \
    python3 "$SRC/data/prepare.py" --input bad.jsonl --tokenizer bytes --out "bad.$n" --workers "$n"
  [ -z "$(ls "bad.$n")" ] || fail "--workers $n left files after the error: $(ls "bad.$n")"
done
echo "prepare_workers_usage: ok"
