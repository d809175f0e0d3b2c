# A run writes the documented run directory: config.resolved.yaml, metrics.jsonl with the
# documented fields, samples.txt, a checkpoint and summary.json; --plan prints the ledger.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
"$ECO_TRAIN" cfg.yaml --set train.eval_interval=4 >run.log 2>&1 || { cat run.log; fail "run failed"; }
grep -q "entropy floor" run.log || fail "no entropy floor printed"
grep -q "ETA" run.log || fail "no ETA in the progress lines"
for f in config.resolved.yaml metrics.jsonl summary.json samples.txt ckpt_00000008.bin; do
  [ -s "run/$f" ] || fail "run/$f missing"
done
python3 - "$WORK/run" <<'PY'
import json, math, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
train = [r for r in recs if "train_loss" in r]
evals = [r for r in recs if "val_loss" in r]
assert [r["step"] for r in train] == list(range(1, 9)), train
for r in train:
    for k in ("step", "tokens", "train_loss", "lr", "grad_norm", "ms_per_step", "tokens_per_s"):
        assert k in r and math.isfinite(r[k]), (k, r)
assert [r["step"] for r in evals] == [4, 8], evals
assert train[-1]["tokens"] == 8 * 4 * 16
s = json.load(open(f"{d}/summary.json"))
for k in ("final_train_loss", "final_val_loss", "steps", "tokens", "wall_s", "tokens_per_s", "params", "memory"):
    assert k in s, k
assert s["steps"] == 8 and s["final_val_loss"] == evals[-1]["val_loss"]
m = s["memory"]
# fp32 AdamW reference: weights 4 B + m 4 B + v 4 B per parameter = 12 B static.
assert m["weights"] == 4 * s["params"] and m["optimizer_state"] == 8 * s["params"], m
assert abs(m["static_bytes_per_param"] - 12.0) < 1e-9, m
print("run outputs ok:", s["final_val_loss"])
PY
# train.profile: steps 6-8 timed per backend operation; the table in the log, the figures in
# summary.json, with the model's operation counts (2 layers x 4 linears + the head = 9 GEMMs).
"$ECO_TRAIN" cfg.yaml --set train.profile=true --set train.out_dir="$WORK/prof" >prof.log 2>&1 ||
  { cat prof.log; fail "profiled run failed"; }
grep -q "per-operation time over 3 steps" prof.log || fail "no per-operation table: $(cat prof.log)"
python3 - "$WORK/prof" <<'PY'
import json, sys
p = json.load(open(f"{sys.argv[1]}/summary.json"))["profile"]
ops = p["operations"]
assert p["steps"] == 3, p
for name, calls in (("matmul_forward", 9), ("matmul_backward", 9), ("attention_forward", 2),
                    ("attention_backward", 2), ("layernorm_forward", 5), ("embedding_forward", 1),
                    ("crossentropy_forward_backward", 1)):
    assert ops[name]["calls_per_step"] == calls, (name, ops[name])
total = sum(o["ms_per_step"] for o in ops.values())
assert 0 < total <= p["ms_per_step"] * 1.01 and p["other_ms_per_step"] >= 0, p
print("profile ok:", round(p["ms_per_step"], 3), "ms/step")
PY
"$ECO_TRAIN" cfg.yaml --plan >plan.txt || fail "--plan failed"
grep -q "h.1.mlp.proj.weight" plan.txt || fail "--plan lacks the parameter table"
grep -q "static bytes per parameter: 12.00" plan.txt || fail "--plan lacks the static bytes line"
[ ! -e run2 ] || fail "--plan must not train"
echo "run_outputs: ok"
