# Divergence: a loss spike stops the run (train.spike_factor) before its update and
# checkpoint, so the last good checkpoint is never pruned; a state holding a non-finite value is
# never written as a checkpoint, whatever the loss says.
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
python3 -c "import json; s=json.load(open('spike/summary.json')); assert s['diverged'] is True, s"
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
