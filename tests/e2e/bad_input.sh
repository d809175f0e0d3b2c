# Bad input of every kind gives one clear line naming the problem and the right exit code
# (2 usage/config, 3 data, 1 otherwise), never a crash or a hang.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"

# -- config ----------------------------------------------------------------------------------
printf 'model: {family: gpt2, n_layer: [1,\n' >malformed.yaml
expect_error 2 "malformed.yaml:" -- "$ECO_TRAIN" malformed.yaml
tiny_config >good.yaml
printf 'model:\n  n_layerz: 3\n' >unknown.yaml
expect_error 2 "unknown key 'model.n_layerz'" -- "$ECO_TRAIN" unknown.yaml
expect_error 2 "unknown key 'optim.lr_max'" -- "$ECO_TRAIN" good.yaml --set optim.lr_max=1
expect_error 2 "'model.n_layer' must be an integer, got 'two'" -- "$ECO_TRAIN" good.yaml --set model.n_layer=two
expect_error 2 "d_model 30 is not divisible by n_head 4" -- "$ECO_TRAIN" good.yaml --set model.d_model=30 --set model.n_head=4
expect_error 2 "exceeds the position table" -- "$ECO_TRAIN" good.yaml --set model.max_seq_len=8
expect_error 2 "no-such.yaml: cannot open config file" -- "$ECO_TRAIN" no-such.yaml
expect_error 2 "unknown option '--frobnicate'" -- "$ECO_TRAIN" good.yaml --frobnicate
# device: cuda without a GPU (or in a build without the CUDA backend) names the reason.
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  expect_error 2 "device: cuda" -- "$ECO_TRAIN" good.yaml --set device=cuda
fi

# -- data ------------------------------------------------------------------------------------
shard_config() {
  cat <<YAML
model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 64, seq_len: 8}
data: {train: $1}
train: {batch_size: 2, max_steps: 2, out_dir: $WORK/run-shards}
YAML
}
shard_config "$WORK/nothing_*.bin" >missing.yaml
expect_error 3 "nothing_*.bin" -- "$ECO_TRAIN" missing.yaml
# A shard with a bad magic number, one with a token outside the vocabulary.
python3 - "$WORK" <<'PY'
import struct, sys
d = sys.argv[1]
def shard(path, toks, magic=20240520):
    hdr = [0] * 256; hdr[0] = magic; hdr[1] = 1; hdr[2] = len(toks)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr)); f.write(struct.pack(f"<{len(toks)}H", *toks))
shard(f"{d}/badmagic.bin", list(range(40)), magic=12345)
shard(f"{d}/oov.bin", [1] * 30 + [200] + [2] * 9)
PY
shard_config "$WORK/badmagic.bin" >badmagic.yaml
expect_error 3 "badmagic.bin" -- "$ECO_TRAIN" badmagic.yaml
shard_config "$WORK/oov.bin" >oov.yaml
expect_error 3 "token 200 at position 30" -- "$ECO_TRAIN" oov.yaml

# -- output directory ------------------------------------------------------------------------
touch afile
expect_error 2 "train.out_dir" -- "$ECO_TRAIN" good.yaml --set train.out_dir="$WORK/afile/sub"

# -- checkpoints -----------------------------------------------------------------------------
"$ECO_TRAIN" good.yaml --set train.max_steps=4 --set train.sample_tokens=0 >/dev/null 2>&1 || fail "tiny run failed"
ckpt="$WORK/run/ckpt_00000004.bin"
[ -f "$ckpt" ] || fail "no checkpoint written"
cp "$ckpt" corrupt.bin
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)" corrupt.bin
expect_error 1 "corrupt" -- "$ECO_TRAIN" good.yaml --resume="$WORK/corrupt.bin"
head -c 1000 "$ckpt" >truncated.bin
expect_error 1 "truncated.bin" -- "$ECO_TRAIN" good.yaml --resume="$WORK/truncated.bin"
expect_error 2 "incompatible config" -- "$ECO_TRAIN" good.yaml --set model.d_model=64 --resume="$ckpt"
expect_error 1 "cannot open checkpoint" -- "$ECO_TRAIN" good.yaml --resume="$WORK/none.bin"
echo "bad_input: all cases passed"
