# The shipped LM1B SMoE config trains on the real corpus the way its header says to prepare it
# (data/prepare.py --val-input: dev sentences are train, test sentences are val), here with the
# bytes tokenizer (instant; the config's 4096 vocab holds byte ids) for 3 steps: the loss is
# finite, the MoE metrics are logged for all 4 MoE layers, and only the experts are quantized.
# Skipped (exit 77) when the LM1B files or numpy are missing; ECO_SHARED_DATA as in
# prepare_and_train.sh.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
LM1B="${ECO_SHARED_DATA:-$SRC/../shared/data}/lm1b"
if [ ! -s "$LM1B/1b_benchmark.dev.tokens" ] || [ ! -s "$LM1B/1b_benchmark.test.tokens" ]; then
  echo "SKIP: smoe_lm1b_config: $LM1B/1b_benchmark.{dev,test}.tokens not found (set ECO_SHARED_DATA)"
  exit 77
fi
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "SKIP: smoe_lm1b_config: the Python module 'numpy' is needed"
  exit 77
fi
python3 "$SRC/data/prepare.py" --input "$LM1B/1b_benchmark.dev.tokens" \
  --val-input "$LM1B/1b_benchmark.test.tokens" --format lines --out lm1b --tokenizer bytes >prepare.log 2>&1 ||
  { cat prepare.log; fail "prepare.py failed"; }
"$ECO_TRAIN" "$SRC/configs/smoe-lm1b-cpu.yaml" --set data.train="$WORK/lm1b/train_*.bin" \
  --set data.val="$WORK/lm1b/val_*.bin" --set train.max_steps=3 --set train.log_interval=1 \
  --set train.eval_batches=1 --set train.sample_tokens=4 --set train.checkpoint_interval=0 \
  --set train.out_dir="$WORK/run" >run.log 2>&1 || { cat run.log; fail "training failed"; }
python3 - "$WORK/run" <<'PY'
import json, math, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
loss = [r["train_loss"] for r in rows if "train_loss" in r]
assert len(loss) == 3 and all(math.isfinite(x) for x in loss), loss
moe = [r["moe"] for r in rows if "moe" in r]
assert moe and len(moe[-1]["layer_loads"]) == 4, moe[-1] if moe else rows
# 8 x 128 tokens, top-2, dropless: every layer routes 2048 slots
assert all(sum(l) == 2048 for l in moe[-1]["layer_loads"]), moe[-1]["layer_loads"]
s = json.load(open(f"{d}/summary.json"))
assert math.isfinite(s["final_val_loss"]), s
assert s["memory"]["quantizable_params"] == 4 * 8 * 2 * 128 * 256, s["memory"]  # expert weights only
print(f"smoe_lm1b_config: loss {loss[0]:.3f} -> {loss[-1]:.3f}, val {s['final_val_loss']:.3f}")
PY
echo "smoe_lm1b_config: ok"
