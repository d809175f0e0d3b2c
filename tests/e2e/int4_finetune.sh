# The INT4 fine-tune's mechanics (results/int4_finetune_cpu.sh at toy size): pretrain, export in
# f32, import with model.init_from under int4 treatments with the paper's recipe (micro-batch 1 x
# accumulation, warmup from lr x 1e-5, cosine to 0, no weight decay; the same synthetic corpus:
# the script's second corpus changes nothing here). A run from model.init_from evaluates the imported weights
# before step 1 (metrics.jsonl step 0, summary.json initial_val_loss): under fp32 that is the
# pretraining's final val loss exactly; under INT4 the RTN-quantized weights' loss; a resumed run
# reads it back rather than evaluating again.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
cat >pre.yaml <<YAML
model: {family: llama, n_layer: 2, n_head: 2, d_model: 32, mlp_hidden: 64, vocab_size: 64, seq_len: 16}
data: {source: synthetic}
optim: {lr: 3.0e-3, warmup_steps: 0}
train: {batch_size: 2, max_steps: 6, log_interval: 1, eval_batches: 4, sample_tokens: 0, threads: 1, out_dir: $WORK/pre}
YAML
"$ECO_TRAIN" pre.yaml >pre.log 2>&1 || { cat pre.log; fail "pretraining"; }
"$ECO_TRAIN" export "$WORK/pre/ckpt_00000006.bin" --out "$WORK/hf" --dtype f32 >/dev/null || fail "export"

value() { python3 -c "import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))" "$@"; }
step0() {  # the val loss metrics.jsonl records at step 0, and how many records step 0 has
  python3 - "$1" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
z = [x for x in r if x["step"] == 0]
print(z[0]["val_loss"] if z else None, len(z))
PY
}
ft=(--set model.init_from="$WORK/hf" --set train.batch_size=1
  --set train.grad_accum=4 --set train.max_steps=6 --set optim.lr=1e-3
  --set optim.warmup_start_lr=1e-8 --set optim.warmup_frac=0.03 --set optim.final_lr_frac=0
  --set optim.weight_decay=0 --set train.checkpoint_interval=3 --set train.keep_checkpoints=4)
# fp32 evaluates as the pretraining did (batch 2, 4 batches): the same loss, bit for bit.
"$ECO_TRAIN" pre.yaml "${ft[@]}" --set train.batch_size=2 --set train.grad_accum=2 \
  --set train.out_dir="$WORK/fp32" \
  >fp32.log 2>&1 || { cat fp32.log; fail "fine-tune under fp32"; }
pre_loss=$(value pre/summary.json final_val_loss)
read -r fp32_0 n < <(step0 fp32/metrics.jsonl)
[ "$n" = 1 ] || fail "fp32: $n step-0 records in metrics.jsonl"
python3 -c "import sys; sys.exit(0 if float('$fp32_0') == float('$pre_loss') else 1)" ||
  fail "fp32 from the f32 export starts at val loss $fp32_0, the pretraining ended at $pre_loss"
[ "$(value fp32/summary.json initial_val_loss)" = "$fp32_0" ] || fail "fp32: summary.json initial_val_loss"
echo "ok: the imported model's val loss at step 0 is the pretraining's final one ($pre_loss)"

for t in int4-eco-sr int4-naive-rtn int4-mw-rtn; do
  "$ECO_TRAIN" pre.yaml "${ft[@]}" --set train.eval_batches=8 --set precision.treatment=$t \
    --set train.out_dir="$WORK/$t" >$t.log 2>&1 || { cat $t.log; fail "fine-tune under $t"; }
  grep -q "stored as $t" $t.log || fail "$t: the log does not say the import was stored as $t"
  grep -q "training 6 steps of 64 tokens (1 x 16 x 4 accum)" $t.log || { cat $t.log; fail "$t: not micro-batch 1 x 4"; }
  read -r q0 n < <(step0 $t/metrics.jsonl)
  python3 -c "import math, sys; v = float('$q0'); sys.exit(0 if math.isfinite(v) and v != float('$pre_loss') else 1)" ||
    fail "$t: step-0 val loss $q0 (expected the INT4 weights' loss, not fp32's $pre_loss)"
  echo "ok: $t starts from the INT4 codes of the import at val loss $q0"
done
# Every INT4 treatment quantizes the import alike (RTN, one scale per tensor).
[ "$(step0 int4-eco-sr/metrics.jsonl)" = "$(step0 int4-mw-rtn/metrics.jsonl)" ] ||
  fail "int4-eco-sr and int4-mw-rtn start from different weights"

# Resume from step 3: step 0 is not evaluated again, summary.json keeps its value.
before=$(value int4-eco-sr/summary.json initial_val_loss)
rm int4-eco-sr/ckpt_00000006.bin int4-eco-sr/summary.json
"$ECO_TRAIN" pre.yaml "${ft[@]}" --set train.eval_batches=8 --set precision.treatment=int4-eco-sr \
  --set train.out_dir="$WORK/int4-eco-sr" --resume >resume.log 2>&1 || { cat resume.log; fail "resume"; }
grep -q "resumed from" resume.log && ! grep -q "step      0/" resume.log || { cat resume.log; fail "resume evaluated step 0 again"; }
read -r _ n < <(step0 int4-eco-sr/metrics.jsonl)
[ "$n" = 1 ] || fail "after resume: $n step-0 records"
[ "$(value int4-eco-sr/summary.json initial_val_loss)" = "$before" ] || fail "resume lost initial_val_loss"
echo "ok: --resume keeps the step-0 val loss"
