# data/prepare.py on the real corpora in ../shared/data with real tokenizers:
# - LM1B (one sentence per line) with the T5 SentencePiece model: every sentence's ids equal the
#   sentencepiece package's, each followed by </s> (1); train and val partition the sentences in
#   order, about 10% val; the same arguments give the same bytes, another --split-seed another
#   split; eco-train trains 3 steps on the shards;
# - the C4 samples (three .json.gz and a JSON-lines file) with the T5 tokenizer.json: every
#   document's ids equal the tokenizers package's, in input order;
# - C4 passages as prefix + gold_completion with GPT-2 from encoder.json + vocab.bpe (tiktoken):
#   ids equal tokenizers' BPE + ByteLevel on the same files, <|endoftext|> = 50256 between them;
# - bad input: a JSON line without the field, a corrupt gzip, a missing tokenizer model: one line
#   naming the file and the problem, non-zero exit.
# Skipped (exit 77) naming what is missing; ECO_SHARED_DATA as in prepare_and_train.sh.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
DATA="${ECO_SHARED_DATA:-$SRC/../shared/data}"
LM1B=$DATA/lm1b/1b_benchmark.dev.tokens
C4_GZ=("$DATA"/c4/olmo_c4-sample.0{1,2,3}.json.gz)
C4_JSON=$DATA/c4/csci662_c4_sample.json
C4_PF=$DATA/c4/pfdecoding_c4.jsonl
T5=$DATA/tokenizers/t5
GPT2=$DATA/tokenizers/gpt2
for f in "$LM1B" "${C4_GZ[@]}" "$C4_JSON" "$C4_PF" "$T5/spiece.model" "$T5/tokenizer.json" \
  "$GPT2/encoder.json" "$GPT2/vocab.bpe"; do
  if [ ! -s "$f" ]; then
    echo "SKIP: prepare_corpora: $f not found (set ECO_SHARED_DATA to the shared data folder)"
    exit 77
  fi
done
for m in numpy sentencepiece tokenizers tiktoken; do
  if ! python3 -c "import $m" 2>/dev/null; then
    echo "SKIP: prepare_corpora: the Python module '$m' is needed (scripts/install_deps.sh)"
    exit 77
  fi
done
prepare() { python3 "$SRC/data/prepare.py" "$@" >>prepare.log 2>&1 || { cat prepare.log; fail "prepare.py $*"; }; }

# ---- LM1B with SentencePiece -------------------------------------------------------------------
SP=(--input "$LM1B" --format lines --tokenizer sentencepiece --tokenizer-model "$T5/spiece.model"
  --shard-tokens 150000)
prepare "${SP[@]}" --out sp
prepare "${SP[@]}" --out sp_again --force
prepare "${SP[@]}" --out sp_seed1 --split-seed 1
for f in sp/*.bin; do
  cmp -s "$f" "sp_again/$(basename "$f")" || fail "same arguments, different bytes: $f"
done
cmp -s sp/val_000000.bin sp_seed1/val_000000.bin && fail "--split-seed 1 gave the same val split"
python3 - "$LM1B" "$T5/spiece.model" <<'PY'
import glob, json, sys
import numpy as np
import sentencepiece as spm

def documents(out, split, eot):
    tokens = np.concatenate([np.fromfile(p, "<u2", offset=1024) for p in sorted(glob.glob(f"{out}/{split}_*.bin"))])
    assert tokens[-1] == eot, f"{split} does not end with the end-of-text id"
    ends = np.flatnonzero(tokens == eot)
    return [d.tolist() for d in np.split(tokens, ends + 1)[:-1]], len(ends)

lines = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
meta = json.load(open("sp/meta.json"))
assert (meta["vocab_size"], meta["eot"], meta["eot_token"]) == (32000, 1, "</s>"), meta
assert sp.encode("Hello world") == [8774, 296]
want = [ids + [1] for ids in sp.encode(lines)]
for out in ("sp", "sp_seed1"):
    train, _ = documents(out, "train", 1)
    val, _ = documents(out, "val", 1)
    assert len(train) + len(val) == len(lines), (len(train), len(val), len(lines))
    t = v = 0  # train and val are the sentences in order, each one's ids the package's
    for i, ids in enumerate(want):
        if t < len(train) and train[t] == ids:
            t += 1
        elif v < len(val) and val[v] == ids:
            v += 1
        else:
            raise AssertionError(f"{out}: sentence {i} {lines[i][:60]!r} is in neither split as {ids[:10]}")
    assert 0.07 < len(val) / len(lines) < 0.13, len(val) / len(lines)
    assert meta["splits"]["train"]["documents"] == len(documents("sp", "train", 1)[0])
print(f"prepare_corpora: LM1B {len(lines)} sentences, {len(val)} val, ids == sentencepiece")
PY
[ "$(ls sp/train_*.bin | wc -l)" -ge 2 ] || fail "--shard-tokens 150000 wrote one train shard"

cat >cfg.yaml <<YAML
model: {family: llama, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 32000, seq_len: 32}
data: {train: $WORK/sp/train_*.bin, val: $WORK/sp/val_*.bin}
optim: {lr: 1.0e-2, warmup_steps: 1}
train: {batch_size: 2, max_steps: 3, log_interval: 1, eval_batches: 1, sample_tokens: 8, out_dir: $WORK/run}
YAML
"$ECO_TRAIN" cfg.yaml >run.log 2>&1 || { cat run.log; fail "training on the SentencePiece shards failed"; }
grep -q "sample:" run.log || fail "no sample printed: $(tail -5 run.log)"

# ---- C4 (gzip and plain JSON lines) with tokenizer.json, and GPT-2 from its files ------------
prepare --input "$DATA/c4/olmo_c4-sample.0*.json.gz" "$C4_JSON" --val-fraction 0 --out hf \
  --tokenizer hf --tokenizer-model "$T5/tokenizer.json"
prepare --input "$C4_PF" --json-field prefix+gold_completion --val-fraction 0 --out gpt2 \
  --tokenizer gpt2 --tokenizer-model "$GPT2"
python3 - "$T5/tokenizer.json" "$GPT2" "$C4_JSON" "$C4_PF" "${C4_GZ[@]}" <<'PY'
import glob, gzip, json, sys
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
t5_json, gpt2, c4_json, c4_pf, *c4_gz = sys.argv[1:]

def shard_documents(out, eot):
    tokens = np.concatenate([np.fromfile(p, "<u2", offset=1024) for p in sorted(glob.glob(f"{out}/train_*.bin"))])
    assert tokens[-1] == eot
    return [d.tolist() for d in np.split(tokens, np.flatnonzero(tokens == eot) + 1)[:-1]]

hf = Tokenizer.from_file(t5_json)
texts = [json.loads(l)["text"] for p in c4_gz for l in gzip.open(p, "rt", encoding="utf-8")]
texts += [json.loads(l)["text"] for l in open(c4_json, encoding="utf-8")]
want = [e.ids + [1] for e in hf.encode_batch(texts, add_special_tokens=False)]
got = shard_documents("hf", 1)
assert len(got) == len(want) == 230, (len(got), len(want))
bad = [i for i in range(len(want)) if got[i] != want[i]]
assert not bad, f"C4 documents {bad[:5]} differ from tokenizers' ids"

bpe = Tokenizer(models.BPE.from_file(f"{gpt2}/encoder.json", f"{gpt2}/vocab.bpe"))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
assert bpe.encode("Hello world!").ids == [15496, 995, 0]
rows = [json.loads(l) for l in open(c4_pf, encoding="utf-8")]
texts = [r["prefix"] + r["gold_completion"] for r in rows]
got = shard_documents("gpt2", 50256)
assert len(got) == len(texts), (len(got), len(texts))
for i in range(20):  # the first 20 passages
    assert got[i] == bpe.encode(texts[i]).ids + [50256], f"passage {i} differs from tokenizers' GPT-2 BPE"
print(f"prepare_corpora: C4 230 documents == tokenizers (T5), {len(texts)} passages, GPT-2 ids checked on 20")
PY

# ---- bad input -----------------------------------------------------------------------------
printf '{"text": "fine"}\n{"url": "http://x", "date": "2019"}\n' >nofield.jsonl
expect_error 3 "nofield.jsonl:2: JSON line has no field 'text'" -- \
  python3 "$SRC/data/prepare.py" --input nofield.jsonl --out bad --tokenizer bytes
head -c 4000 "${C4_GZ[0]}" >cut.json.gz
expect_error 3 "cut.json.gz: corrupt gzip" -- \
  python3 "$SRC/data/prepare.py" --input cut.json.gz --out bad --tokenizer bytes
expect_error 1 "tokenizer model not found: $WORK/none.model" -- \
  python3 "$SRC/data/prepare.py" --input "$LM1B" --out bad --tokenizer sentencepiece --tokenizer-model "$WORK/none.model"
echo "prepare_corpora: ok"
