# model.init_from with a damaged Hugging Face checkpoint: a tiny gpt2 run is exported (f32, bf16,
# f32 in shards, fp8 codes), and each export is broken one way: a NaN or an infinity in a tensor
# (under fp32 and under int4-eco-sr, which would quantize it), in a codes export's codes or
# scales, a truncated file, a header length of 2^63 or past the end, a header that is not an
# object, overlapping offsets, bytes no tensor claims, an unknown dtype, a shape that disagrees
# with the bytes, a missing or an extra tensor, a tied lm_head that differs from the embedding,
# config.json with another hidden size or vocab, an index naming a missing shard, a symbolic link
# loop or a dangling link for model.safetensors, a FIFO for config.json. Each start must exit
# non-zero with one line naming the file (and the tensor) before train.out_dir is created: the
# whole import is checked first (docs/errors.md, "model.init_from").
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
cat >cfg.yaml <<YAML
model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}
data: {source: synthetic}
optim: {lr: 3.0e-3, warmup_steps: 0}
train: {batch_size: 2, max_steps: 2, log_interval: 1, eval_batches: 1, sample_tokens: 0, threads: 1, out_dir: $WORK/base}
YAML
"$ECO_TRAIN" cfg.yaml >base.log 2>&1 || { cat base.log; fail "base run"; }
"$ECO_TRAIN" cfg.yaml --set precision.treatment=fp8-eco-rtn --set train.out_dir="$WORK/base8" \
  >base8.log 2>&1 || { cat base8.log; fail "fp8 base run"; }
ck=$WORK/base/ckpt_00000002.bin
"$ECO_TRAIN" export "$ck" --out "$WORK/f32" --dtype f32 >/dev/null || fail "export f32"
"$ECO_TRAIN" export "$ck" --out "$WORK/bf16" >/dev/null || fail "export bf16"
"$ECO_TRAIN" export "$ck" --out "$WORK/shards" --dtype f32 --shard-size 20KB >/dev/null ||
  fail "export f32 in shards"
"$ECO_TRAIN" export "$WORK/base8/ckpt_00000002.bin" --out "$WORK/codes" --codes >/dev/null ||
  fail "export --codes"
[ -f shards/model.safetensors.index.json ] || fail "--shard-size 20KB wrote no index"
grep -q 'c_attn.weight.codes' codes/model.safetensors || fail "--codes wrote no codes"

# A clean import trains (the checks refuse nothing good), under fp32 and int4-eco-sr.
for t in fp32 int4-eco-sr; do
  "$ECO_TRAIN" cfg.yaml --set model.init_from="$WORK/f32" --set precision.treatment=$t \
    --set train.out_dir="$WORK/good_$t" >good_$t.log 2>&1 || { cat good_$t.log; fail "clean import under $t"; }
done
"$ECO_TRAIN" cfg.yaml --set model.init_from="$WORK/codes" --set precision.treatment=fp8-eco-rtn \
  --set train.out_dir="$WORK/good_codes" >good_codes.log 2>&1 || { cat good_codes.log; fail "clean codes import"; }
echo "ok: clean imports train"

# edit_file FILE PYTHON: PYTHON changes safetensors file FILE (path p; header h, a dict; data d,
# a bytearray; `t` the first weight of block 0; put(name, k, value) sets element k of an F32 or
# BF16 tensor), written back with the header's true length unless PYTHON sets `raw` (the whole
# file's bytes; b: the original bytes). edit SRC DST PYTHON: the same on DST, a copy of SRC.
edit_file() {
  python3 - "$1" "$2" <<'PY'
import json, math, struct, sys
p, code = sys.argv[1], sys.argv[2]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
d = bytearray(b[8 + n:])
t = "transformer.h.0.attn.c_attn.weight"
raw = None
def put(name, k, value):
    e = h[name]
    at = e["data_offsets"][0]
    if e["dtype"] == "F32":
        d[at + 4 * k:at + 4 * k + 4] = struct.pack("<f", value)
    else:  # BF16: the high half of the float
        d[at + 2 * k:at + 2 * k + 2] = struct.pack("<f", value)[2:]
exec(code)
if raw is None:
    text = json.dumps(h).encode()
    raw = struct.pack("<Q", len(text)) + text + bytes(d)
open(p, "wb").write(raw)
PY
}
edit() {
  rm -rf "$2"
  cp -r "$1" "$2"
  edit_file "$2/model.safetensors" "$3"
}

# bad CODE NEEDLE DIR [--set ...]: a fresh start from DIR exits CODE with one line containing
# NEEDLE, and leaves no run directory.
n=0
bad() {
  local code=$1 needle=$2 dir=$3
  shift 3
  n=$((n + 1))
  expect_error "$code" "$needle" -- "$ECO_TRAIN" cfg.yaml --set model.init_from="$WORK/$dir" \
    --set train.out_dir="$WORK/out$n" "$@"
  [ ! -e "$WORK/out$n" ] || fail "$dir: the refused import left $WORK/out$n behind"
}

# -- non-finite values ---------------------------------------------------------------------------
edit f32 nan 'put(t, 17, math.nan)'
for t in fp32 int4-eco-sr fp8-eco-rtn; do
  bad 3 "nan/model.safetensors: tensor 'transformer.h.0.attn.c_attn.weight' holds 1 non-finite value(s), the first (nan) at element 17 (index [0, 17]" \
    nan --set precision.treatment=$t
done
edit f32 inf 'put("transformer.h.1.mlp.c_proj.weight", 5, math.inf); put("transformer.h.1.mlp.c_proj.weight", 9, -math.inf)'
bad 3 "inf/model.safetensors: tensor 'transformer.h.1.mlp.c_proj.weight' holds 2 non-finite value(s), the first (inf) at element 5" \
  inf --set precision.treatment=int4-eco-sr
edit bf16 bf16_nan 'put("transformer.wpe.weight", 40, -math.inf)'
bad 3 "tensor 'transformer.wpe.weight' holds 1 non-finite value(s), the first (-inf) at element 40 (index [1, 8]" bf16_nan
edit f32 ln_nan 'put("transformer.ln_f.bias", 3, math.nan)'
bad 3 "tensor 'transformer.ln_f.bias' holds 1 non-finite value(s)" ln_nan --set precision.treatment=int4-eco-sr
# A shard of a sharded export.
rm -rf shard_nan && cp -r shards shard_nan
shard=$(python3 -c "import json; print(json.load(open('shard_nan/model.safetensors.index.json'))['weight_map']['transformer.h.1.attn.c_attn.weight'])")
edit_file "shard_nan/$shard" 'put("transformer.h.1.attn.c_attn.weight", 0, math.nan)'
bad 3 "shard_nan/$shard: tensor 'transformer.h.1.attn.c_attn.weight' holds 1 non-finite value(s)" shard_nan
# Codes: an E4M3 NaN code (0x7f), a NaN scale; imported as codes (fp8) or dequantized (fp32).
edit codes nan_code 'd[h[t + ".codes"]["data_offsets"][0] + 33] = 0x7F'
for t in fp8-eco-rtn fp32; do
  bad 3 "tensor 'transformer.h.0.attn.c_attn.weight.codes' decodes to 1 non-finite value(s), the first (nan) at element 33 (index [1, 1] of shape [96, 32])" \
    nan_code --set precision.treatment=$t
done
edit codes nan_scale 'put(t + ".scales", 2, math.nan)'
bad 3 "tensor 'transformer.h.0.attn.c_attn.weight.scales' holds 1 non-finite value(s), the first (nan) at element 2" \
  nan_scale --set precision.treatment=fp8-eco-rtn

# -- malformed files -----------------------------------------------------------------------------
rm -rf trunc && cp -r f32 trunc && truncate -s -64 trunc/model.safetensors
bad 3 "trunc/model.safetensors: tensor" trunc
edit f32 len63 'raw = struct.pack("<Q", 1 << 63) + b[8:]'
bad 3 "len63/model.safetensors: header length 9223372036854775808 exceeds the format's limit" len63
edit f32 lenpast 'raw = struct.pack("<Q", len(b)) + b[8:]'
bad 3 "lenpast/model.safetensors: header length" lenpast
edit f32 notobj 'text = b"[1, 2, 3]"; raw = struct.pack("<Q", len(text)) + text'
bad 3 "notobj/model.safetensors: the header does not start with a JSON object" notobj
edit f32 overlap 'a, z = h[t]["data_offsets"]; h[t]["data_offsets"] = [a - 4, z - 4]'
bad 3 "overlap/model.safetensors: tensors" overlap
edit f32 gap 'd += bytes(16)'
bad 3 "gap/model.safetensors: the data region has" gap
edit f32 dtype 'h[t]["dtype"] = "F12"'
bad 3 "dtype/model.safetensors: tensor 'transformer.h.0.attn.c_attn.weight': unknown dtype 'F12'" dtype
edit f32 shape 'h[t]["shape"] = [32, 95]'
bad 3 "shape/model.safetensors: tensor 'transformer.h.0.attn.c_attn.weight': data_offsets" shape

# -- tensors that do not fit the model -----------------------------------------------------------
edit f32 missing 'e = h.pop("transformer.h.1.ln_2.bias"); a, z = e["data_offsets"]; del d[a:z]
for v in h.values():
    if isinstance(v, dict) and "data_offsets" in v and v["data_offsets"][0] >= z:
        v["data_offsets"] = [v["data_offsets"][0] - (z - a), v["data_offsets"][1] - (z - a)]'
bad 2 "missing tensor 'transformer.h.1.ln_2.bias'" missing
edit f32 extra 'h["transformer.h.2.ln_1.weight"] = {"dtype": "F32", "shape": [32], "data_offsets": [len(d), len(d) + 128]}; d += bytes(128)'
bad 2 "unexpected tensor 'transformer.h.2.ln_1.weight'" extra
edit f32 head 'h["lm_head.weight"] = {"dtype": "F32", "shape": [64, 32], "data_offsets": [len(d), len(d) + 8192]}; d += bytes(8192)'
bad 2 "head/model.safetensors: lm_head.weight differs from the embedding" head
rm -rf hidden && cp -r f32 hidden && sed -i 's/"n_embd": 32/"n_embd": 64/' hidden/config.json
bad 2 "hidden/config.json does not describe the run's model: n_embd is 64, the run's model.d_model is 32" hidden
rm -rf vocab && cp -r f32 vocab && sed -i 's/"vocab_size": 64/"vocab_size": 50257/' vocab/config.json
bad 2 "vocab/config.json does not describe the run's model: vocab_size is 50257" vocab
rm -rf noshard && cp -r shards noshard
python3 - <<'PY'
import json
p = "noshard/model.safetensors.index.json"
j = json.load(open(p))
j["weight_map"]["transformer.h.1.attn.c_attn.weight"] = "model-00009-of-00009.safetensors"
open(p, "w").write(json.dumps(j))
PY
bad 3 "noshard/model.safetensors.index.json: weight_map['transformer.h.1.attn.c_attn.weight'] names model-00009-of-00009.safetensors, which is not in" noshard

# -- paths that are not regular files ------------------------------------------------------------
rm -rf loop && cp -r f32 loop && rm loop/model.safetensors
ln -s loop2 loop/model.safetensors && ln -s model.safetensors loop/loop2
bad 3 "loop/model.safetensors: is a symbolic link loop, not a safetensors file" loop
rm -rf dangling && cp -r f32 dangling && rm dangling/model.safetensors
ln -s gone.safetensors dangling/model.safetensors
bad 3 "dangling/model.safetensors: is a dangling symbolic link (to 'gone.safetensors'), not a safetensors file" dangling
rm -rf fifo && cp -r f32 fifo && rm fifo/config.json && mkfifo fifo/config.json
bad 2 "fifo/config.json' is a FIFO, not a regular file" fifo
rm -rf fifo_w && cp -r f32 fifo_w && rm fifo_w/model.safetensors && mkfifo fifo_w/model.safetensors
bad 3 "fifo_w/model.safetensors: not a regular file (a FIFO)" fifo_w
rm -rf loop_dir && ln -s loop_dir loop_dir
bad 2 "'$WORK/loop_dir' is not a directory: it is a symbolic link loop" loop_dir

# -- an existing run directory is left as it was -------------------------------------------------
mkdir -p kept && echo keep >kept/note
expect_error 3 "nan/model.safetensors" -- "$ECO_TRAIN" cfg.yaml --set model.init_from="$WORK/nan" \
  --set train.out_dir="$WORK/kept"
[ "$(ls -A kept)" = note ] || { ls -A kept; fail "a refused import wrote into an existing out_dir"; }
# --resume-if-present on an empty out_dir starts afresh, so it checks the import first too.
bad 3 "nan/model.safetensors" nan --resume-if-present

# -- two ranks: each refuses the import, and mpirun exits -----------------------------------------
if command -v mpirun >/dev/null; then
  rc=0
  out=$(timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root "$ECO_TRAIN" cfg.yaml \
    --set model.init_from="$WORK/nan" --set parallel.dp=2 --set train.out_dir="$WORK/mpi" 2>&1) || rc=$?
  if grep -q "built without MPI" <<<"$out"; then
    echo "ok (built without MPI: the two-rank refusal not run)"
  else
    [ "$rc" != 0 ] && [ "$rc" != 124 ] || { echo "$out"; fail "two ranks: exit $rc"; }
    grep -q "\[rank [01]/2\] model.init_from: $WORK/nan/model.safetensors: tensor" <<<"$out" ||
      { echo "$out"; fail "two ranks: no rank names the file and tensor"; }
    [ ! -e "$WORK/mpi" ] || fail "two ranks: the refused import left a run directory"
    echo "ok: two ranks refuse the import (exit $rc), no run directory"
  fi
fi
echo "bad_import: ok ($n refused starts)"
