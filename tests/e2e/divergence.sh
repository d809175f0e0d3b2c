# Divergence: a loss spike stops the run (train.spike_factor) before its update and
# checkpoint, so the last good checkpoint is never pruned; the run stays diverged across resumes
# (--resume refuses it without --resume-diverged; the checkpoint carries the detector's window,
# so a resumed run judges its first loss); a state holding a non-finite value is never written as
# a checkpoint, whatever the loss says.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
common=(--set train.sample_tokens=0 --set train.checkpoint_interval=1 --set train.keep_checkpoints=1)

# -- lr 10 without clipping: the loss jumps from 4.2 to ~2800 at step 2 -------------------------
rc=0
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set optim.lr=10 --set optim.weight_decay=0 --set optim.warmup_steps=0 \
  --set optim.grad_clip=0 --set train.max_steps=40 --set train.out_dir="$WORK/spike" >spike.log 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a diverging run exited $rc, expected 1: $(tail -3 spike.log)"
grep -q "training diverged at step 2: loss .* the lowest running median .*train.spike_factor 4" spike.log ||
  fail "no spike message: $(tail -3 spike.log)"
[ "$(ls spike/ckpt_*.bin)" = "spike/ckpt_00000001.bin" ] || fail "expected only the last good checkpoint, step 1: $(ls spike)"
python3 -c "import json; s=json.load(open('spike/summary.json')); assert s['diverged'] is True and s['divergence'].startswith('training diverged at step 2: loss'), s"

# -- a diverged run stays diverged across resumes -----------------------------------------------
spike=(cfg.yaml "${common[@]}" --set optim.lr=10 --set optim.weight_decay=0 --set optim.warmup_steps=0
  --set optim.grad_clip=0 --set train.max_steps=40)
# --resume refuses, naming the record and the checkpoint it would resume from.
rc=0
out=$("$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/spike" --resume 2>&1 >/dev/null) || rc=$?
[ "$rc" = 1 ] || fail "--resume of a diverged run exited $rc, expected 1: $out"
grep -qF "the run in train.out_dir '$WORK/spike' diverged ($WORK/spike/summary.json: training diverged at step 2: loss" <<<"$out" &&
  grep -qF "resuming from $WORK/spike/ckpt_00000001.bin (step 1) would train into it again: --resume-diverged" <<<"$out" ||
  fail "the refusal does not say what diverged and what it would resume from: $out"
[ "$(grep -c . <<<"$out")" = 1 ] || fail "expected one line of error, got: $out"
[ "$(ls spike/ckpt_*.bin)" = "spike/ckpt_00000001.bin" ] || fail "the refused resume changed the checkpoints: $(ls spike)"
expect_error 2 "--resume-diverged goes with --resume" -- "$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/spike" --resume-diverged
# The checkpoint carries the detector's window: the first loss after a resume is judged, so the
# run diverges again at step 2, with --resume-diverged and from a copy in a fresh directory alike.
rc=0
"$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/spike" --resume --resume-diverged >again.log 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "--resume-diverged exited $rc, expected 1 (the same spike): $(tail -3 again.log)"
grep -q "resuming a run that diverged (training diverged at step 2: .*) from $WORK/spike/ckpt_00000001.bin (step 1)" again.log &&
  grep -q "training diverged at step 2: loss .* the lowest running median" again.log ||
  fail "--resume-diverged: $(tail -3 again.log)"
mkdir copy && cp spike/ckpt_00000001.bin copy/
rc=0
"$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/copy" --resume >copy.log 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a copy of the last good checkpoint resumed exited $rc, expected 1: $(tail -3 copy.log)"
grep -q "training diverged at step 2: loss .* the lowest running median" copy.log || fail "copy: $(tail -3 copy.log)"
# With the detector turned off, --resume-diverged trains on to the end; the record then says so,
# and a later --resume finds the run complete.
"$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/spike" --resume --resume-diverged --set train.spike_factor=0 \
  >off.log 2>&1 || fail "--resume-diverged with train.spike_factor=0 failed: $(tail -3 off.log)"
python3 -c "import json; s=json.load(open('spike/summary.json')); assert s['diverged'] is False and s['steps'] == 40 and 'divergence' not in s, s"
"$ECO_TRAIN" "${spike[@]}" --set train.out_dir="$WORK/spike" --resume >done.log 2>&1 || fail "--resume of the finished run failed: $(tail -3 done.log)"
grep -q "the run is complete (step 40)" done.log || fail "$(tail -3 done.log)"
# train.spike_factor=0 turns the detector off: the same run then trains to the end.
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set optim.lr=10 --set optim.weight_decay=0 --set optim.warmup_steps=0 \
  --set optim.grad_clip=0 --set train.max_steps=4 --set train.spike_factor=0 --set train.out_dir="$WORK/nospike" \
  >nospike.log 2>&1 || fail "with the detector off the run failed: $(tail -3 nospike.log)"

# -- a NaN in the optimizer state: the loss of the next step is finite, its weights are not -----
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.keep_checkpoints=8 --set train.out_dir="$WORK/a" >a.log 2>&1 || fail "run a failed"
python3 - a/ckpt_00000004.bin nan.bin <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
pos = 8 + 4 + 8 + 8                                   # the format of src/train/checkpoint.cpp
def s():
    global pos
    n, = struct.unpack_from("<Q", b, pos); pos += 8 + n; return pos - n, n
s(); s()                                              # fingerprint, config
count, = struct.unpack_from("<I", b, pos); pos += 4
for _ in range(count):
    at, n = s(); name = bytes(b[at:at + n]).decode()
    at, n = s()
    if name == "wte.v": struct.pack_into("<f", b, at, float("nan"))
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
open(sys.argv[2], "wb").write(b)
PY
rc=0
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/nan" \
  --resume="$WORK/nan.bin" >nan.log 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a run whose state went NaN exited $rc, expected 1: $(tail -3 nan.log)"
grep -q "training diverged by step 5: 'wte' holds nan .*no checkpoint of it written" nan.log ||
  fail "the non-finite state is not named: $(tail -3 nan.log)"
[ -z "$(ls nan/ckpt_*.bin 2>/dev/null)" ] || fail "a checkpoint was written: $(ls nan)"
echo "divergence: all cases passed"
