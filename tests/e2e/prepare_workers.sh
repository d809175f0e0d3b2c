# data/prepare.py --workers N on the real corpora and tokenizers in ../shared/data: for every
# tokenizer, the outputs with 1, 2 and 3 workers are byte-identical (sha256 of every shard and of
# decode_table.bin / tokenizer.json; meta.json equal but for its timings), with --val-fraction
# (the document split) and with --val-input, over several shards; the BPE trained here encodes
# the same in the workers as in this process. A document the tokenizer cannot encode (a lone
# surrogate, past the first two batches) gives the same one-line error and exit code with 1, 2
# and 3 workers; a worker killed mid-run fails the run at once (exit 1, one line, no shard left,
# no worker left).
# Skipped (exit 77) naming what is missing; ECO_SHARED_DATA as in prepare_and_train.sh.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
DATA="${ECO_SHARED_DATA:-$SRC/../shared/data}"
TEXT=$DATA/tinyshakespeare.txt
LM1B=$DATA/lm1b/1b_benchmark.dev.tokens
LM1B_VAL=$DATA/lm1b/1b_benchmark.test.tokens
C4_GZ=("$DATA"/c4/olmo_c4-sample.0{1,2,3}.json.gz)
C4_JSON=$DATA/c4/csci662_c4_sample.json
C4_PF=$DATA/c4/pfdecoding_c4.jsonl
T5=$DATA/tokenizers/t5
GPT2=$DATA/tokenizers/gpt2
for f in "$TEXT" "$LM1B" "$LM1B_VAL" "${C4_GZ[@]}" "$C4_JSON" "$C4_PF" "$T5/spiece.model" \
  "$T5/tokenizer.json" "$GPT2/encoder.json" "$GPT2/vocab.bpe"; do
  if [ ! -s "$f" ]; then
    echo "SKIP: prepare_workers: $f not found (set ECO_SHARED_DATA to the shared data folder)"
    exit 77
  fi
done
for m in numpy sentencepiece tokenizers tiktoken; do
  if ! python3 -c "import $m" 2>/dev/null; then
    echo "SKIP: prepare_workers: the Python module '$m' is needed (scripts/install_deps.sh)"
    exit 77
  fi
done
prepare() { python3 "$SRC/data/prepare.py" "$@" >>prepare.log 2>&1 || { cat prepare.log; fail "prepare.py $*"; }; }

# fingerprint DIR: sha256 of every file but meta.json, then meta.json without its timings.
fingerprint() {
  (cd "$1" && sha256sum $(ls | grep -v '^meta.json$') &&
    python3 -c 'import json; m = json.load(open("meta.json")); m.pop("seconds"); print(json.dumps(m, sort_keys=True))')
}

# same_for_workers NAME ARGS...: prepare.py ARGS with --workers 1, 2 and 3 writes the same bytes.
same_for_workers() {
  local name=$1
  shift
  for n in 1 2 3; do
    prepare "$@" --out "$name.$n" --workers "$n"
    tail -1 prepare.log | grep -q "on $n worker" || fail "$name: --workers $n not reported: $(tail -1 prepare.log)"
  done
  fingerprint "$name.1" >"$name.1.sum"
  [ "$(ls "$name".1/train_*.bin | wc -l)" -ge 2 ] || fail "$name: one train shard; the test wants several"
  for n in 2 3; do
    fingerprint "$name.$n" >"$name.$n.sum"
    diff "$name.1.sum" "$name.$n.sum" >/dev/null || { diff "$name.1.sum" "$name.$n.sum"; fail "$name: --workers $n differs from 1"; }
  done
  echo "ok: $name: --workers 1, 2, 3 byte-identical ($(grep -c . "$name.1.sum") files)"
}

same_for_workers bytes --input "$TEXT" --tokenizer bytes --val-fraction 0.2 --shard-tokens 200000
same_for_workers bpe --input "$TEXT" --tokenizer bpe --vocab-size 512 --bpe-train-chars 300000 \
  --shard-tokens 100000
same_for_workers sp --input "$LM1B" --val-input "$LM1B_VAL" --format lines --tokenizer sentencepiece \
  --tokenizer-model "$T5/spiece.model" --shard-tokens 150000
same_for_workers hf --input "$DATA/c4/olmo_c4-sample.0*.json.gz" "$C4_JSON" --val-fraction 0.3 \
  --split-seed 7 --tokenizer hf --tokenizer-model "$T5/tokenizer.json" --shard-tokens 60000
same_for_workers gpt2 --input "$C4_PF" --json-field prefix+gold_completion --tokenizer gpt2 \
  --tokenizer-model "$GPT2" --shard-tokens 100000
[ -s bpe.1/tokenizer.json ] || fail "bpe: no tokenizer.json"

# ---- a document the tokenizer cannot encode, past the first batch ----------------------------
python3 - "$C4_JSON" <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8").readlines()
with open("surrogate.jsonl", "w", encoding="utf-8") as f:
    f.writelines(lines)  # 0.75 MB: the bad line comes after three 256 KiB batches
    f.write('{"text": "a lone \\ud83d half of a pair"}\n')
    f.writelines(lines[:10])
PY
bad=$(($(wc -l <"$C4_JSON") + 1))
for n in 1 2 3; do  # with 3, batches 1-4 go to the two workers
  expect_error 3 "surrogate.jsonl:$bad: the sentencepiece tokenizer cannot encode this document: it holds the lone surrogate U+D83D" -- \
    python3 "$SRC/data/prepare.py" --input surrogate.jsonl --out surrogate.$n --workers $n \
    --tokenizer sentencepiece --tokenizer-model "$T5/spiece.model"
  [ -z "$(ls surrogate.$n)" ] || fail "--workers $n left files after the error: $(ls surrogate.$n)"
done

# ---- a worker killed mid-run -----------------------------------------------------------------
inputs=()
for _ in $(seq 30); do inputs+=("$LM1B"); done
python3 "$SRC/data/prepare.py" --input "${inputs[@]}" --format lines --out killed --workers 2 \
  --tokenizer sentencepiece --tokenizer-model "$T5/spiece.model" >killed.log 2>killed.err &
parent=$!
workers=""
for _ in $(seq 300); do
  workers=$(pgrep -P "$parent" -f "multiprocessing.spawn" | tr '\n' ' ' || true)
  [ -n "$workers" ] && break
  sleep 0.05
done
[ -n "$workers" ] || { kill "$parent"; fail "no worker process appeared"; }
kill -9 ${workers%% *}
start=$(date +%s)
while kill -0 "$parent" 2>/dev/null && [ $(( $(date +%s) - start )) -lt 60 ]; do sleep 0.2; done
if kill -0 "$parent" 2>/dev/null; then kill -9 "$parent"; fail "prepare.py still running 60 s after a worker was killed"; fi
rc=0
wait "$parent" || rc=$?
[ "$rc" = 1 ] || fail "a killed worker: exit $rc, expected 1: $(cat killed.err)"
[ "$(grep -c . killed.err)" = 1 ] && grep -q "a --workers process ended without its result" killed.err ||
  fail "a killed worker: expected one line of error, got: $(cat killed.err)"
[ -z "$(ls killed)" ] || fail "a killed worker left files: $(ls killed)"
for _ in $(seq 50); do
  left=""
  for w in $workers; do kill -0 "$w" 2>/dev/null && left+=" $w"; done
  [ -z "$left" ] && break
  sleep 0.2
done
[ -z "$left" ] || fail "worker processes left behind:$left"
echo "ok: a killed worker: exit 1 after $(( $(date +%s) - start )) s: $(cat killed.err)"
# The same death seen at a submission rather than a result (the pool already broken when the next
# batch is handed over) is the same one line: WorkerDied, not a BrokenProcessPool traceback.
cat >submit_race.py <<'PY'
import os, signal, time
import tokenizer_backends as tb
from encode_workers import Encoder, WorkerDied
def main():
    enc = Encoder(tb.BytesTokenizer(), "uint16", 2)
    enc.submit([("warm-up", "\n", "train")], 0)
    enc.finish()
    for pid in list(enc.pool._processes):
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if enc.pool._broken:
            break
        time.sleep(0.05)
    assert enc.pool._broken, "the pool never noticed its dead worker"
    try:
        enc.submit([("after", "\n", "train")], 1)
        enc.finish()
    except WorkerDied as e:
        print("ok: a worker dead before a submission:", e)
    else:
        raise SystemExit("no WorkerDied")
    finally:
        enc.close()


if __name__ == "__main__":
    main()
PY
PYTHONPATH="$SRC/data" python3 submit_race.py || fail "a worker dead before a submission is not WorkerDied"
echo "prepare_workers: ok"
