# Hostile configs and inputs: every config value bounded and checked (ints in 64 bits,
# floats finite and in range), config files and shards that are not regular files, oversized
# files and values, multi-document YAML, and models that cannot fit the device's memory, each
# refused at once with one line and exit 2 (config) or 3 (data); never a hang, a crash or a
# silently ignored value.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >good.yaml
# Every refusal here comes before training or allocation: at most a few seconds each.
bad() { expect_error "$1" "$2" -- timeout 20 "$ECO_TRAIN" "${@:4}"; }

# -- integers: bounded, the limit named ------------------------------------------------------
bad 2 "'train.threads': expected a number of threads in [0, " -- good.yaml --set train.threads=1000000
bad 2 "'train.threads': expected a number of threads in [0, " -- good.yaml --set train.threads=half
bad 2 "'model.d_model': must be in [1, 1048576], got 600000000" -- good.yaml --set model.d_model=600000000 --plan
bad 2 "'model.n_layer': must be in [1, 4096], got 1000000000" -- good.yaml --set model.n_layer=1000000000
bad 2 "'model.n_layer' must be an integer in [" -- good.yaml --set model.n_layer=3000000000
bad 2 "'train.grad_accum': must be in [1, 16384], got 1000000000" -- good.yaml --set train.grad_accum=1000000000
bad 2 "'train.eval_batches': must be in [1, 10000], got 1000000000" -- good.yaml --set train.eval_batches=1000000000
bad 2 "'train.sample_tokens': must be in [0, 100000], got 1000000000" -- good.yaml --set train.sample_tokens=1000000000
bad 2 "key 'train.max_tokens'" -- good.yaml --set train.max_steps=0 --set train.max_tokens=-1
bad 2 "'train.spike_window'" -- good.yaml --set train.spike_window=0

# -- floats: finite and in a sane range ------------------------------------------------------
bad 2 "'optim.eps': must be a finite number" -- good.yaml --set optim.eps=.inf
bad 2 "'model.norm_eps': must be a finite number" -- good.yaml --set model.norm_eps=.inf
bad 2 "'optim.lr': must be a finite number in (0, 10], got 1e+300" -- good.yaml --set optim.lr=1e300
bad 2 "'optim.weight_decay': must be a finite number" -- good.yaml --set optim.weight_decay=.inf
bad 2 "'optim.grad_clip'" -- good.yaml --set optim.grad_clip=.nan
bad 2 "'model.rope_theta'" -- good.yaml --set model.rope_theta=.inf
bad 2 "'train.sample_temperature'" -- good.yaml --set train.sample_temperature=.inf
bad 2 "'train.spike_factor'" -- good.yaml --set train.spike_factor=.nan
bad 2 "lr x weight_decay" -- good.yaml --set optim.lr=5 --set optim.weight_decay=1

# -- the world and the experts: the message names dp x ep, the world and one fix -------------
moe=(--set model.moe.n_experts=4 --set model.moe.expert_hidden=32)
bad 2 "parallel.dp 1 x parallel.ep 2 = 2 ranks, but the world has 1 (launch 2: mpirun -np 2, or set parallel.ep: 1)" -- good.yaml "${moe[@]}" --set parallel.ep=2
bad 2 "parallel.dp 2 x parallel.ep 1 = 2 ranks, but the world has 1 (launch 2: mpirun -np 2, or set parallel.dp: 1)" -- good.yaml --set parallel.dp=2
bad 2 "'model.moe.n_experts': must be >= 1, got -1 (0, or no model.moe: a dense model)" -- good.yaml --set model.moe.n_experts=-1
# model.moe.n_experts: 0 is the dense model (the section's other keys unread), as docs/configs.md says.
timeout 60 "$ECO_TRAIN" good.yaml "${moe[@]}" --set model.moe.n_experts=0 --set train.max_steps=2 \
  --set train.out_dir="$WORK/dense0" >dense0.log 2>&1 || { cat dense0.log; fail "n_experts: 0 did not train"; }
grep -q "moe" "$WORK/dense0/config.resolved.yaml" && fail "n_experts: 0 trained a MoE: $(cat "$WORK/dense0/config.resolved.yaml")"
echo "ok: model.moe.n_experts: 0 trains the dense model"

# -- config files that are not one small regular file ----------------------------------------
mkfifo fifo.yaml
bad 2 "fifo.yaml: not a regular file (a FIFO)" -- fifo.yaml
mkdir dir.yaml
bad 2 "dir.yaml: is a directory" -- dir.yaml
bad 2 "/dev/zero: not a regular file (a character device)" -- /dev/zero
head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' 'a' >huge.yaml
bad 2 "more than the limit of 1048576 bytes" -- huge.yaml
printf 'model: {family: %s}\n' "$(head -c 200000 /dev/zero | tr '\0' 'a')" >longvalue.yaml
out=$("$ECO_TRAIN" longvalue.yaml 2>&1 >/dev/null) && fail "a 200 KB value was accepted"
[ ${#out} -lt 400 ] || fail "the error line quotes the whole value (${#out} characters)"
grep -qF "(200000 characters)" <<<"$out" || fail "the value's length is not named: $out"
printf 'data: {source: synthetic}\ntrain: {max_steps: 2}\n---\ntrain: {max_steps: 3}\n' >multi.yaml
bad 2 "multi.yaml: holds 2 YAML documents" -- multi.yaml

# -- shards that are not regular files -------------------------------------------------------
shard_config() {
  cat <<YAML
model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 64, seq_len: 8}
data: {train: "$1"}
train: {batch_size: 2, max_steps: 2, out_dir: $WORK/run-shards}
YAML
}
mkdir -p shards_dir/sub.bin
shard_config "$WORK/shards_dir/*" >shard_dir.yaml
bad 3 "sub.bin: is a directory" -- shard_dir.yaml
mkdir -p shards_fifo && mkfifo shards_fifo/a.bin
shard_config "$WORK/shards_fifo/*.bin" >shard_fifo.yaml
bad 3 "a.bin: not a regular file (a FIFO)" -- shard_fifo.yaml

# -- models that cannot fit: refused before any allocation, --plan says so -------------------
huge=(--set model.n_layer=4000 --set model.d_model=8192 --set model.n_head=64)
start=$(date +%s)
bad 2 "the run does not fit: the plan needs " -- good.yaml "${huge[@]}"
rc=0
plan=$(timeout 60 "$ECO_TRAIN" good.yaml "${huge[@]}" --plan 2>/dev/null) || rc=$?
[ "$rc" = 2 ] || fail "--plan of a model that does not fit exited $rc"
grep -q "^memory: the plan needs .* available .*: does not fit$" <<<"$plan" || fail "--plan lacks 'does not fit'"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "refusing a model that does not fit took over 30 s"
"$ECO_TRAIN" good.yaml --plan | grep -q "^memory: .*: fits$" || fail "--plan of the tiny model does not say it fits"
[ ! -e run ] || fail "a refused run created its directory"
echo "bad_config: all cases passed"
