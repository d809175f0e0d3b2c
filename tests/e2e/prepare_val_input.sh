# data/prepare.py --val-input: a corpus that ships its own heldout file (LM1B) keeps it whole as
# val and all of --input as train (bytes tokenizer, so the token counts are the byte counts); a
# second run is a no-op, a changed val file is not; --val-fraction beside it is refused. Needs
# numpy only (skipped, exit 77, without it).
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "SKIP: prepare_val_input: the Python module 'numpy' is needed"
  exit 77
fi
printf 'the train text\nsecond line\n' >train.txt
printf 'held out\n' >val.txt
prepare() { python3 "$SRC/data/prepare.py" --input train.txt --val-input val.txt --out out --tokenizer bytes "$@"; }
prepare >first.log 2>&1 || { cat first.log; fail "prepare.py --val-input failed"; }
python3 - <<'PY'
import json, os
import numpy as np
meta = json.load(open("out/meta.json"))
train, val = meta["splits"]["train"], meta["splits"]["val"]
assert train["tokens"] == 27 and val["tokens"] == 9, (train, val)  # the two files' bytes
assert [e["path"] for e in meta["request"]["val_inputs"]] == [os.path.abspath("val.txt")], meta["request"]
for split, want in (("train", b"the train text\nsecond line\n"), ("val", b"held out\n")):
    tokens = np.fromfile(f"out/{split}_000000.bin", dtype="<u2", offset=256 * 4)  # after the header
    assert bytes(tokens.astype(np.uint8)) == want, (split, tokens)
PY
prepare >second.log 2>&1 && grep -q "up to date" second.log || fail "a repeat run was not a no-op: $(cat second.log)"
printf 'held out, longer\n' >val.txt
prepare >third.log 2>&1 && ! grep -q "up to date" third.log || fail "a changed val file was not re-read: $(cat third.log)"
grep -q "val: 17 tokens" third.log || fail "val not re-tokenized: $(cat third.log)"
rc=0
out=$(prepare --val-fraction 0.1 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q -- "--val-input and --val-fraction exclude each other" <<<"$out" ||
  fail "--val-fraction with --val-input: exit $rc: $out"
echo "prepare_val_input: ok"
