# The run directory is one run's: an exclusive lock (a second run is refused, naming
# the holder's pid), a fresh run is refused where an earlier run's checkpoints are unless
# --overwrite, temp files of killed writes are removed at start, and no more than
# train.keep_checkpoints checkpoints are ever kept.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
quiet=(--set train.sample_tokens=0)

# -- the lock: a second run in the same directory is refused with the first one's pid ---------
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.max_steps=1000000 --set train.log_interval=1000 \
  --set train.out_dir="$WORK/locked" >first.log 2>&1 &
first=$!
trap 'kill $first 2>/dev/null || true; rm -rf "$WORK"' EXIT  # no run outlives a failed test
for _ in $(seq 100); do grep -q "training 1000000 steps" first.log && break; sleep 0.1; done
grep -q "training 1000000 steps" first.log || { kill $first; fail "the first run did not start: $(cat first.log)"; }
expect_error 2 "is in use by another eco-train run (pid $first" -- "$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/locked"
expect_error 2 "is in use by another eco-train run (pid $first" -- "$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/locked" --resume
kill -INT $first
rc=0; wait $first || rc=$?
[ "$rc" = 130 ] || fail "the interrupted first run exited $rc, expected 130: $(tail -3 first.log)"
ls locked/ckpt_*.bin >/dev/null 2>&1 || fail "the interrupted run left no checkpoint"
# The lock went with the process: the run can be resumed now.
timeout 60 "$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.max_steps=1000000 --set train.out_dir="$WORK/locked" \
  --resume >second.log 2>&1 &
second=$!
trap 'kill $second 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do grep -q "resumed from" second.log && break; sleep 0.1; done
kill -TERM $second
rc=0; wait $second || rc=$?
[ "$rc" = 143 ] || fail "the resumed run, stopped by SIGTERM, exited $rc, expected 143: $(tail -3 second.log)"

# -- a fresh run where an earlier run's checkpoints are ---------------------------------------
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.max_steps=8 >a.log 2>&1 || fail "run A failed: $(cat a.log)"
expect_error 2 "holds checkpoints of an earlier run (newest: $WORK/run/ckpt_00000008.bin)" -- \
  "$ECO_TRAIN" cfg.yaml --set train.max_steps=6 --set train.seed=7
[ -f run/ckpt_00000008.bin ] || fail "the refused run touched the earlier run's checkpoint"
expect_error 2 "--overwrite starts over" -- "$ECO_TRAIN" cfg.yaml --overwrite --resume
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.max_steps=6 --set train.seed=7 --set train.checkpoint_interval=2 \
  --overwrite >b.log 2>&1 || fail "run B with --overwrite failed: $(cat b.log)"
[ ! -e run/ckpt_00000008.bin ] || fail "--overwrite kept the earlier run's ckpt_00000008.bin"
[ -f run/ckpt_00000006.bin ] || fail "run B's final checkpoint was pruned"
python3 -c "import json; s=json.load(open('run/summary.json')); assert s['steps'] == 6, s" || fail "summary.json is not run B's"
# --resume=PATH into a directory holding newer checkpoints of another run is refused as well.
mkdir -p other && cp run/ckpt_00000004.bin other/
expect_error 2 "holds $WORK/run/ckpt_00000006.bin, newer than" -- "$ECO_TRAIN" cfg.yaml --set train.max_steps=6 \
  --set train.seed=7 --set train.checkpoint_interval=2 --resume="$WORK/other/ckpt_00000004.bin"

# -- temp files left by killed writes are removed at start ------------------------------------
mkdir -p stale
touch stale/ckpt_00000004.bin.tmp stale/summary.json.tmp stale/config.resolved.yaml.tmp
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.out_dir="$WORK/stale" >stale.log 2>&1 || fail "run in stale/ failed"
[ -z "$(ls stale | grep '\.tmp$')" ] || fail "stale temp files remain: $(ls stale)"
grep -q "removed .*ckpt_00000004.bin.tmp, left by a write that was killed" stale.log || fail "the removal is not reported"

# -- never more than keep_checkpoints checkpoints ----------------------------------------------
"$ECO_TRAIN" cfg.yaml "${quiet[@]}" --set train.max_steps=9 --set train.checkpoint_interval=1 \
  --set train.keep_checkpoints=3 --set train.out_dir="$WORK/keep" >keep.log 2>&1 || fail "keep run failed"
[ "$(ls keep/ckpt_*.bin | wc -l)" = 3 ] || fail "kept $(ls keep/ckpt_*.bin | wc -l) checkpoints, expected 3"
[ -f keep/ckpt_00000009.bin ] || fail "the final checkpoint is missing"
echo "run_dir: all cases passed"
