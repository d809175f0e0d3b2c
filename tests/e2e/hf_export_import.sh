# Hugging Face checkpoints through eco-train (src/hf/): `eco-train export` writes config.json and
# model.safetensors (bf16 by default, f32, shards above --shard-size); model.init_from starts a
# run from such a directory under a quantized treatment; --resume ignores it. A llama SMoE
# exported and imported on 2 expert-parallel ranks (each loading its own experts) ends where
# the same run on 2 data-parallel ranks does (with mpirun). Bad input: one line, exit 2 (usage)
# or 3 (a malformed weights file).
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
cat >llama.yaml <<YAML
model: {family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, mlp_hidden: 48, vocab_size: 64, seq_len: 16}
data: {source: synthetic}
optim: {lr: 3.0e-3, warmup_steps: 0}
train: {batch_size: 2, max_steps: 3, log_interval: 1, eval_batches: 1, sample_tokens: 0, threads: 1, out_dir: $WORK/base}
YAML
"$ECO_TRAIN" llama.yaml >base.log 2>&1 || { cat base.log; fail "base run"; }
ck=$WORK/base/ckpt_00000003.bin

"$ECO_TRAIN" export "$ck" --out "$WORK/hf" >export.log || fail "export (bf16)"
[ -f hf/config.json ] && [ -f hf/model.safetensors ] || fail "export wrote no config.json / model.safetensors"
grep -q '"model_type": "llama"' hf/config.json || fail "config.json is not a llama's"
grep -q '"BF16"' hf/model.safetensors || fail "the default export is not bf16"
"$ECO_TRAIN" export "$ck" --out "$WORK/hf32" --dtype f32 --shard-size 20KB >/dev/null || fail "export (f32, sharded)"
shards=$(ls hf32 | grep -c '^model-0000.-of-0000.\.safetensors$' || true)
[ -f hf32/model.safetensors.index.json ] && [ "$shards" -ge 2 ] ||
  { ls hf32; fail "--shard-size 20KB wrote no shards"; }
echo "ok: export bf16 and f32 in shards"

# A fresh run from the export, its weights quantized under fp8-eco-rtn.
"$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/hf32" --set precision.treatment=fp8-eco-rtn \
  --set train.out_dir="$WORK/ft" --set train.max_steps=4 >ft.log 2>&1 || { cat ft.log; fail "init_from run"; }
grep -q "weights from the Hugging Face checkpoint $WORK/hf32 (model.init_from), stored as fp8-eco-rtn" ft.log ||
  { cat ft.log; fail "the run does not say it started from the export"; }
# --resume continues from the checkpoint and ignores init_from.
"$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/hf32" --set precision.treatment=fp8-eco-rtn \
  --set train.out_dir="$WORK/ft" --set train.max_steps=4 --resume \
  >resume.log 2>&1 || { cat resume.log; fail "--resume with init_from"; }
grep -q "resumed from" resume.log && ! grep -q "weights from the Hugging Face" resume.log ||
  { cat resume.log; fail "--resume read model.init_from"; }
# The directory is read by a fresh start only: --plan and --resume work without it.
"$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/gone" --plan >plan_gone.log 2>&1 ||
  { cat plan_gone.log; fail "--plan read a missing model.init_from"; }
"$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/gone" --set precision.treatment=fp8-eco-rtn \
  --set train.out_dir="$WORK/ft" --set train.max_steps=4 --resume >resume_gone.log 2>&1 ||
  { cat resume_gone.log; fail "--resume read a missing model.init_from"; }
echo "ok: init_from under fp8-eco-rtn, ignored by --resume (and by --plan) even when the directory is gone"

# -- bad input --------------------------------------------------------------------------------
expect_error 2 "--dtype 'f16': expected bf16 or f32" -- "$ECO_TRAIN" export "$ck" --out x --dtype f16
expect_error 2 "export: --out DIR is required" -- "$ECO_TRAIN" export "$ck"
expect_error 2 "--shard-size 'lots'" -- "$ECO_TRAIN" export "$ck" --out x --shard-size lots
expect_error 1 "no-such.bin" -- "$ECO_TRAIN" export "$WORK/no-such.bin" --out x
mkdir empty
expect_error 2 "key 'model.init_from'" -- "$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/empty"
expect_error 2 "'$WORK/gone' is not a directory" -- "$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/gone" --set train.out_dir="$WORK/bad0"
[ ! -e "$WORK/bad0" ] || fail "a missing model.init_from left a run directory behind"
expect_error 2 "num_attention_heads is 4, the run's model.n_head is 2" -- \
  "$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/hf" --set model.n_head=2 --set model.n_kv_head=0 --set train.out_dir="$WORK/bad1"
cp -r hf trunc
truncate -s -64 trunc/model.safetensors
expect_error 3 "run past the data region" -- \
  "$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/trunc" --set train.out_dir="$WORK/bad2"
cp -r hf lying
python3 - "$WORK/lying/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = sorted(k for k in h if k != "__metadata__")[0]
h[name]["data_offsets"][1] -= 2  # overlaps nothing, leaves a gap before the next tensor
text = json.dumps(h).encode()
open(p, "wb").write(struct.pack("<Q", len(text)) + text + b[8 + n:])
PY
expect_error 3 "lying/model.safetensors" -- \
  "$ECO_TRAIN" llama.yaml --set model.init_from="$WORK/lying" --set train.out_dir="$WORK/bad3"

# -- expert parallelism: each rank loads its own experts ----------------------------------------
command -v mpirun >/dev/null || { echo "ok (no mpirun: expert-parallel import not run)"; exit 0; }
MPI=(mpirun --oversubscribe --allow-run-as-root)
export OMPI_MCA_rmaps_base_oversubscribe=1
moe=(--set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=16
  --set model.moe.router=softmax_topk --set model.moe.norm_topk=true)
"$ECO_TRAIN" llama.yaml "${moe[@]}" --set train.out_dir="$WORK/moe" >moe.log 2>&1 || { cat moe.log; fail "moe run"; }
"$ECO_TRAIN" export "$WORK/moe/ckpt_00000003.bin" --out "$WORK/hf_moe" --dtype f32 >/dev/null || fail "moe export"
grep -q '"model_type": "mixtral"' hf_moe/config.json || fail "the SMoE was not exported as Mixtral"
for par in "dp 2 1" "ep 1 2"; do
  read -r name dp ep <<<"$par"
  out=$("${MPI[@]}" -np 2 "$ECO_TRAIN" llama.yaml "${moe[@]}" --set model.init_from="$WORK/hf_moe" \
    --set parallel.dp=$dp --set parallel.ep=$ep --set train.out_dir="$WORK/$name" 2>&1) || {
    grep -q "built without MPI" <<<"$out" && { echo "ok (built without MPI)"; exit 0; }
    echo "$out"; fail "$name: init_from on 2 ranks"; }
done
"$CKPT" diff "$WORK/dp/ckpt_00000003.bin" "$WORK/ep/ckpt_00000003.bin" >diff.txt ||
  { cat diff.txt; fail "init_from under ep 2 differs from dp 2"; }
echo "ok: init_from under expert parallelism equals data parallelism"
