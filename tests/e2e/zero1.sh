# ZeRO-1 over MPI (optim/zero_shards.h): each rank keeps the moments of its own rows of
# every parameter, updates them, and all-gathers the stored weights (FP8 / INT4 codes and scales,
# plain values). The training state must be byte-identical to zero 0 (every rank updating all of
# it) and to one rank accumulating the same micro-batches: fp32, bf16-mw, fp8-eco-sr, int4-eco-sr
# (per-tensor scales: whole tensors per rank), bf16 moments, SGD with momentum (no v), a
# sigmoid_bias sparse MoE, and 4 ranks with parameters divided between ranks by rows. A ZeRO-1
# checkpoint holds the whole moments (gathered to rank 0): it resumes on one rank at zero 0, and
# one rank's checkpoint resumes on 2 ranks at zero 1, byte for byte. With expert parallelism
# (ep 2, ep 2 x dp 2) ZeRO-1 shards the dense parameters over the world and the experts over
# their dp ranks: the same bits, and checkpoints that resume on one rank and back. summary.json reports the bytes all-gathered per quantized
# parameter (codes + scales: 1 + 4 / columns under per-row FP8 scales, against 2 for bf16).
# Skips (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
tiny_config >cfg.yaml
# d_model 64: the MLP's 256 and the attention's 192 rows are two 128-row pieces each, so that
# ranks divide parameters by rows.
common=(--set model.d_model=64 --set train.max_steps=10 --set train.batch_size=2
  --set train.sample_tokens=0 --set train.log_interval=5 --set train.threads=1
  --set precision.treatment=fp8-eco-sr)

probe=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" --set parallel.dp=2 \
  --set parallel.zero=1 --plan 2>&1) || {
  grep -q "built without MPI" <<<"$probe" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "$probe"; fail "mpirun -np 2 eco-train --plan (zero 1) failed"; }
grep -q "zero 1 (ZeRO-1: moments of" <<<"$probe" || { echo "$probe"; fail "--plan says nothing of ZeRO-1"; }

# run NAME NP ZERO ARGS...: trains into $WORK/NAME with NP ranks (1: no mpirun) at zero ZERO.
run() {
  local name=$1 np=$2 zero=$3
  shift 3
  local cmd=("$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/$name" "$@")
  [ "$np" -gt 1 ] && cmd=("${MPI[@]}" -np "$np" "${cmd[@]}" --set parallel.dp="$np" --set parallel.zero="$zero")
  "${cmd[@]}" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name: exit $?"; }
}

for t in fp32 bf16-mw fp8-eco-sr int4-eco-sr; do
  run "one_$t" 1 0 --set precision.treatment="$t" --set train.grad_accum=2
  run "z1_$t" 2 1 --set precision.treatment="$t"
  same "one_$t" "z1_$t"
done
run z0_fp8 2 0
same z0_fp8 z1_fp8-eco-sr
run one_bf16state 1 0 --set optim.state_dtype=bf16 --set train.grad_accum=2
run z1_bf16state 2 1 --set optim.state_dtype=bf16
same one_bf16state z1_bf16state
run one_sgdm 1 0 --set optim.name=sgdm --set train.grad_accum=2
run z1_sgdm 2 1 --set optim.name=sgdm
same one_sgdm z1_sgdm
moe=(--set precision.quantize=experts --set model.moe.n_experts=4 --set model.moe.top_k=2
  --set model.moe.expert_hidden=32 --set model.moe.router=sigmoid_bias
  --set model.moe.bias_update_rate=0.01)
run one_moe 1 0 "${moe[@]}" --set train.grad_accum=2
run z1_moe 2 1 "${moe[@]}"
same one_moe z1_moe
run one4 1 0 --set train.grad_accum=4
run z1_4 4 1
same one4 z1_4
# The reduce-scatter overlapping the backward (parallel.overlap: each block's range cut to the
# ranks' rows) equals the sums after the backward, 2 micro-batches a rank included.
run z0_acc2_after 2 0 --set train.grad_accum=2
run z1_acc2 2 1 --set train.grad_accum=2 --set parallel.overlap=true
same z0_acc2_after z1_acc2
grep -Eq "ZeRO-1: .* [1-9][0-9]* of [0-9]+ parameters divided between ranks by rows" z1_4.log ||
  { grep ZeRO z1_4.log; fail "4 ranks divided no parameter by rows: the row ranges go untested"; }
echo "ok: $(grep -o '[0-9]* of [0-9]* parameters divided between ranks by rows' z1_4.log) (4 ranks)"

# The control: ZeRO-1 with one micro-batch a step is a different training.
run control 1 0
if "$CKPT" diff "$WORK/control/ckpt_00000010.bin" "$WORK/z1_fp8-eco-sr/ckpt_00000010.bin" \
  >diff_control.txt; then
  fail "the control run equals the ZeRO-1 run: the comparison cannot fail"
fi
echo "ok: the control differs ($(tail -1 diff_control.txt))"

# Checkpoints hold the whole moments, whatever the sharding.
run ck_z1 2 1 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5
run ck_one 1 0 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5 --set train.grad_accum=2
"$CKPT" diff "$WORK/ck_z1/ckpt_00000005.bin" "$WORK/ck_one/ckpt_00000005.bin" >diff_ck5.txt ||
  { cat diff_ck5.txt; fail "the step-5 checkpoints of ZeRO-1 and one rank differ"; }
mkdir -p "$WORK/z1_to_one" "$WORK/one_to_z1"
cp "$WORK/ck_z1/ckpt_00000005.bin" "$WORK/z1_to_one/"
cp "$WORK/ck_one/ckpt_00000005.bin" "$WORK/one_to_z1/"
run z1_to_one 1 0 --set train.grad_accum=2 --resume
run one_to_z1 2 1 --resume
grep -q "resumed from .*ckpt_00000005.bin at step 5" z1_to_one.log || fail "z1 -> one did not resume"
grep -q "resumed from .*ckpt_00000005.bin at step 5" one_to_z1.log || fail "one -> z1 did not resume"
same z1_to_one one_fp8-eco-sr
same one_to_z1 one_fp8-eco-sr
echo "ok: ZeRO-1 checkpoints are whole; resumed 2 ranks (zero 1) -> 1 rank and back byte for byte"

# ZeRO-1 with expert parallelism: the dense parameters divided over the world, each rank's
# experts over the dp ranks that hold them. One llama layer of 6 SwiGLU experts of 256: each rank
# of an ep 2 group holds 3, their fc weights 512 rows (four pieces), so the cut between its 2 dp
# ranks falls inside the second expert's fc weight (an even number of experts a rank would be
# cut between experts). ep 2 on 2 ranks and ep 2 x dp 2 on 4 equal one rank accumulating, under
# fp8-eco-sr (experts quantized), int4-eco-sr (per-tensor: whole experts) and bf16-mw (masters).
# run_ep NAME DP EP ARGS...: as run, at zero 1 on DP x EP ranks.
run_ep() {
  local name=$1 dp=$2 ep=$3
  shift 3
  "${MPI[@]}" -np $((dp * ep)) "$ECO_TRAIN" cfg.yaml "${common[@]}" "${moe[@]}" \
    "${ep_shape[@]}" --set train.out_dir="$WORK/$name" --set parallel.dp="$dp" \
    --set parallel.ep="$ep" --set parallel.zero=1 "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name: exit $?"; }
}
ep_shape=(--set model.family=llama --set model.n_layer=1 --set model.moe.n_experts=6
  --set model.moe.expert_hidden=256)
ep_moe=("${moe[@]}" "${ep_shape[@]}")
ep_plan=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "${ep_moe[@]}" --set parallel.ep=2 \
  --set parallel.zero=1 --plan 2>&1) || { echo "$ep_plan"; fail "--plan (ep 2, zero 1) failed"; }
grep -q "ep 2 = 2 ranks, zero 1" <<<"$ep_plan" && grep -q "ZeRO-1: moments of .* this rank's experts over the 1 ranks" <<<"$ep_plan" ||
  { echo "$ep_plan"; fail "--plan of ep 2, zero 1 says nothing of ZeRO-1"; }
run one_ep2 1 0 "${ep_moe[@]}" --set train.grad_accum=2
run_ep z1_ep2 1 2
same one_ep2 z1_ep2
for t in fp8-eco-sr int4-eco-sr bf16-mw; do
  run "one_ep4_$t" 1 0 "${ep_moe[@]}" --set train.grad_accum=4 --set precision.treatment="$t" \
    --set train.checkpoint_interval=5 --set train.keep_checkpoints=5
  run_ep "z1_ep2dp2_$t" 2 2 --set precision.treatment="$t" --set train.checkpoint_interval=5 \
    --set train.keep_checkpoints=5
  same "one_ep4_$t" "z1_ep2dp2_$t"
done
# The dense reduce-scatter overlapping the backward under expert parallelism: the same bits.
run_ep z1_ep2dp2_overlap 2 2 --set parallel.overlap=true
grep -q "gradient sums overlap the backward: each block's dense parameters'" z1_ep2dp2_overlap.log ||
  { grep "gradient sums" z1_ep2dp2_overlap.log; fail "ep 2 x dp 2 at zero 1 did not overlap"; }
same one_ep4_fp8-eco-sr z1_ep2dp2_overlap
grep -Eq "the dense ones divided over the 4 ranks, each rank's experts over the 2 that hold them; .*by rows \([1-9][0-9]* of them experts'\)" \
  z1_ep2dp2_fp8-eco-sr.log || { grep ZeRO z1_ep2dp2_fp8-eco-sr.log; fail "ep 2 x dp 2 divided no expert by rows"; }
echo "ok: ep 2 x dp 2: $(grep -o '[0-9]* of [0-9]* parameters divided between ranks by rows ([0-9]* of them experts.)' z1_ep2dp2_fp8-eco-sr.log)"
# Its checkpoints hold the whole moments: ep 2 x dp 2 (zero 1) -> one rank, and one rank -> ep 2 x dp 2.
mkdir -p "$WORK/ep_to_one" "$WORK/one_to_ep"
cp "$WORK/z1_ep2dp2_fp8-eco-sr/ckpt_00000005.bin" "$WORK/ep_to_one/"
cp "$WORK/one_ep4_fp8-eco-sr/ckpt_00000005.bin" "$WORK/one_to_ep/"
run ep_to_one 1 0 "${ep_moe[@]}" --set train.grad_accum=4 --resume
run_ep one_to_ep 2 2 --resume
grep -q "resumed from .*ckpt_00000005.bin at step 5" ep_to_one.log || fail "ep -> one did not resume"
grep -q "resumed from .*ckpt_00000005.bin at step 5" one_to_ep.log || fail "one -> ep did not resume"
same ep_to_one one_ep4_fp8-eco-sr
same one_to_ep one_ep4_fp8-eco-sr
echo "ok: ZeRO-1 with ep 2 (x dp 2) equals one rank; its checkpoints resume on one rank and back"

# The all-gather's payload per quantized parameter: codes (1 byte) + per-row scales (4 bytes a row).
python3 - "$WORK/z1_fp8-eco-sr/summary.json" <<'PY' || fail "summary.json's ZeRO-1 figures"
import json, sys
p = json.load(open(sys.argv[1]))["parallel"]
z = p["zero1_all_gather"]
b = z["bytes_per_quantized_param"]
assert p["zero"] == 1 and p["bytes_sent"]["reduce_scatter"] > 0, p
# Matrices of 64 columns (4 / 64 = 0.0625) and one of 256 (the MLP projection): 1 + 4 / 64 at most.
assert 1.0 < b <= 1.0 + 4 / 64 + 1e-9, b
assert z["bytes_per_value"] == 4.0, z
print(f"ok: ZeRO-1 all-gathers {b:.4f} bytes per quantized parameter a step (bf16: 2)")
PY
