# --resume's promises: it asks for a checkpoint (--resume-if-present does not), it
# takes the newest valid one (naming and setting aside a damaged newer one), refuses a
# CRC-valid checkpoint holding an impossible step, refuses a checkpoint of another trajectory
# (seed, lr, batch, ...), and a finished run resumed keeps (or rebuilds, key for key, an SMoE's
# moe block included) its summary.json and prunes a checkpoint beyond train.keep_checkpoints;
# metrics.jsonl after a resume holds the uninterrupted run's records, each once.
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

# -- a finished run holding one checkpoint more than train.keep_checkpoints (as a kill between the
# final checkpoint's rename and the pruning leaves it): resuming it prunes ----------------------
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.checkpoint_interval=2 --set train.out_dir="$WORK/k" >k.log 2>&1 || fail "run k failed"
cp k/ckpt_00000006.bin k/ckpt_00000004.bin
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.checkpoint_interval=2 --set train.out_dir="$WORK/k" --resume >k2.log 2>&1 ||
  fail "resuming the finished run k failed: $(cat k2.log)"
grep -q "removed $WORK/k/ckpt_00000004.bin (train.keep_checkpoints 2)" k2.log || fail "the extra checkpoint is not named: $(cat k2.log)"
[ "$(cd k && ls ckpt_*)" = "$(printf 'ckpt_00000006.bin\nckpt_00000008.bin')" ] || fail "expected 2 checkpoints kept: $(ls k)"

# -- an SMoE run killed right after its final checkpoint: the rebuilt summary.json equals the
# uninterrupted one key for key (the wall-clock figures aside), its moe block included ---------
smoe=("$SRC/configs/smoe-tiny-cpu.yaml" --set train.max_steps=12 --set train.log_interval=5 --set train.eval_interval=6
  --set train.eval_batches=2 --set train.sample_tokens=0 --set train.checkpoint_interval=6 --set train.threads=1)
"$ECO_TRAIN" "${smoe[@]}" --set train.out_dir="$WORK/moe" >moe.log 2>&1 || fail "the SMoE run failed: $(tail -3 moe.log)"
cp -r moe moe_killed
rm moe_killed/summary.json
"$ECO_TRAIN" "${smoe[@]}" --set train.out_dir="$WORK/moe_killed" --resume >moe2.log 2>&1 || fail "rebuilding the SMoE summary failed: $(tail -3 moe2.log)"
python3 - moe/summary.json moe_killed/summary.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
wall_clock = {"wall_s", "tokens_per_s"}
assert "moe" in a, a
assert set(a) == set(b), (sorted(set(a) ^ set(b)))
for k in set(a) - wall_clock:
    assert a[k] == b[k], (k, a[k], b[k])
print("SMoE summary rebuilt key for key:", sorted(a))
PY

# -- metrics.jsonl after a resume holds the uninterrupted run's records, each once: the records
# past the checkpoint and a torn last line are dropped, and the first step after the resume is
# printed but not recorded unless it is a log step -----------------------------------------------
m=(cfg.yaml "${quiet[@]}" --set train.max_steps=12 --set train.log_interval=3 --set train.eval_interval=4
  --set train.checkpoint_interval=4 --set train.keep_checkpoints=5)
"$ECO_TRAIN" "${m[@]}" --set train.out_dir="$WORK/m" >m.log 2>&1 || fail "run m failed"
mkdir m_killed  # as a run killed during step 7 leaves it
cp m/ckpt_00000004.bin m_killed/
python3 - m/metrics.jsonl m_killed/metrics.jsonl <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l)["step"] <= 6]
open(sys.argv[2], "w").write("".join(lines) + '{"grad_norm": 0.5, "lr": 0.00')
PY
"$ECO_TRAIN" "${m[@]}" --set train.out_dir="$WORK/m_killed" --resume >m2.log 2>&1 || fail "resuming m failed: $(cat m2.log)"
grep -q "step      5/12 | loss" m2.log || fail "the first step after the resume is not printed"
python3 - m/metrics.jsonl m_killed/metrics.jsonl <<'PY'
import json, sys
def records(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        key = (r["step"], "val_loss" in r)
        assert key not in out, f"{path}: step {r['step']} recorded twice"
        out[key] = {k: v for k, v in r.items() if k not in ("ms_per_step", "tokens_per_s")}
    return out
a, b = records(sys.argv[1]), records(sys.argv[2])
assert a == b, (sorted(a), sorted(b))
print("metrics.jsonl after a resume: steps", sorted(s for s, _ in a))
PY
echo "resume_cases: all cases passed"
