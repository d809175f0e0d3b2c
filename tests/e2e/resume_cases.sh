# --resume's promises: it asks for a checkpoint (--resume-if-present does not), it
# takes the newest valid one (naming and setting aside a damaged newer one), refuses a
# CRC-valid checkpoint holding an impossible step, refuses a checkpoint of another trajectory
# (seed, lr, batch, ...), and a finished run resumed keeps (or rebuilds) its summary.json.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
quiet=(--set train.sample_tokens=0)

# -- --resume needs a checkpoint; --resume-if-present does not --------------------------------
expect_error 1 "--resume: no checkpoint in $WORK/run" -- "$ECO_TRAIN" cfg.yaml --resume
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --resume-if-present >present.log 2>&1 || fail "--resume-if-present failed: $(cat present.log)"
grep -q "no checkpoint in .*starting from scratch" present.log || fail "--resume-if-present did not say it started afresh"
rm -rf run

# -- the newest checkpoint damaged, an older one valid -----------------------------------------
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.checkpoint_interval=2 --set train.keep_checkpoints=4 \
  --set train.out_dir="$WORK/c" >c.log 2>&1 || fail "run c failed"
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)" c/ckpt_00000008.bin
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.checkpoint_interval=2 --set train.keep_checkpoints=4 \
  --set train.out_dir="$WORK/c" --resume >c2.log 2>&1 || fail "resume past a damaged checkpoint failed: $(cat c2.log)"
grep -q "skipping .*ckpt_00000008.bin: .*corrupt" c2.log || fail "the damaged checkpoint is not named: $(cat c2.log)"
grep -q "resumed from .*ckpt_00000006.bin at step 6" c2.log || fail "did not resume from step 6"
[ -f c/ckpt_00000008.bin.corrupt ] && [ -f c/ckpt_00000008.bin ] || fail "expected the damaged file set aside and a new final checkpoint"

# -- a CRC-valid checkpoint with an impossible step ---------------------------------------------
python3 - c/ckpt_00000006.bin neg.bin <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<q", b, 12, -5)                      # magic 8 | version 4 | step 8
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
open(sys.argv[2], "wb").write(b)
PY
expect_error 1 "corrupt checkpoint: step -5" -- "$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/neg" --resume="$WORK/neg.bin"

# -- a checkpoint of another trajectory ---------------------------------------------------------
expect_error 2 "train.seed: 1337 in the checkpoint, 7 now" -- "$ECO_TRAIN" cfg.yaml --set train.checkpoint_interval=2 \
  --set train.keep_checkpoints=4 --set train.out_dir="$WORK/c" --set train.seed=7 --resume
expect_error 2 "optim.lr: 0.003 in the checkpoint, 0.001 now" -- "$ECO_TRAIN" cfg.yaml --set train.checkpoint_interval=2 \
  --set train.keep_checkpoints=4 --set train.out_dir="$WORK/c" --set optim.lr=1e-3 --resume
expect_error 2 "train.batch_size: 4 in the checkpoint, 2 now" -- "$ECO_TRAIN" cfg.yaml --set train.checkpoint_interval=2 \
  --set train.keep_checkpoints=4 --set train.out_dir="$WORK/c" --set train.batch_size=2 --resume

# -- a finished run, resumed: its summary kept, or rebuilt when the run died before writing it --
"$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/f" >f.log 2>&1 || fail "run f failed"
cp f/summary.json summary.orig
"$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/f" --resume >f2.log 2>&1 || fail "resuming a finished run failed: $(cat f2.log)"
cmp -s f/summary.json summary.orig || fail "resuming a finished run rewrote its summary.json"
grep -q "the run is complete" f2.log || fail "resuming a finished run did not say it is complete"
rm f/summary.json  # as if killed right after the final checkpoint
"$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/f" --resume >f3.log 2>&1 || fail "resume after the final checkpoint failed: $(cat f3.log)"
python3 - summary.orig f/summary.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("final_train_loss", "final_val_loss", "steps", "tokens"):
    assert b[k] is not None and b[k] == a[k], (k, a[k], b[k])
print("summary rebuilt:", b["final_train_loss"], b["final_val_loss"])
PY
echo "resume_cases: all cases passed"
