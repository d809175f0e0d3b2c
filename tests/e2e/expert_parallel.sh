# Expert parallelism over MPI (parallel.ep; model/expert_parallel.h): world = dp x ep, rank
# r = d * ep + e; every rank reads its own micro-batch, rank e of an expert-parallel group owns
# experts [e E / ep, (e + 1) E / ep) and runs every source rank's tokens through them, segment by
# segment, and expert gradients are folded over the world in rank order. The training state must
# be byte-identical (eco-ckpt diff) to the same world without expert parallelism: ep 2 to dp 2,
# ep 2 x dp 2 to dp 4, for a sigmoid_bias and a softmax_topk SMoE under fp8-eco-sr (experts
# quantized) and fp32, a llama SMoE with a shared expert and dropped tokens; grad_accum 2 keeps
# the bits too (each source's accumulation is kept). A
# checkpoint always holds every expert: an ep 2 run's step-5 checkpoint continued at dp 2 ends
# where the uninterrupted run does, and dp 2 -> ep 2 too. A control (another router) differs.
# Expert rows sized below the worst case (parallel.ep_row_factor) grow when a step routes more.
# The dense gradient sums overlapping the backward (parallel.overlap) keep the bits.
# Skips (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
tiny_config >cfg.yaml
common=(--set model.d_model=64 --set train.max_steps=10 --set train.batch_size=2
  --set train.sample_tokens=0 --set train.log_interval=5 --set train.threads=1
  --set precision.treatment=fp8-eco-sr --set precision.quantize=experts
  --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=32)
sigmoid_bias=(--set model.moe.router=sigmoid_bias --set model.moe.bias_update_rate=0.01)
softmax_topk=(--set model.moe.router=softmax_topk)

probe=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "${sigmoid_bias[@]}" \
  --set parallel.ep=2 --plan 2>&1) || {
  grep -q "built without MPI" <<<"$probe" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "$probe"; fail "mpirun -np 2 eco-train --plan (ep 2) failed"; }
grep -q "expert parallelism: each rank holds 2 of the 4 routed experts" <<<"$probe" || { echo "$probe"; fail "--plan says nothing of ep"; }

# run NAME DP EP ARGS...: trains into $WORK/NAME on DP x EP ranks (1: no mpirun), the
# sigmoid_bias router unless ARGS name one.
run() {
  local name=$1 dp=$2 ep=$3
  shift 3
  local np=$((dp * ep)) router=("${sigmoid_bias[@]}")
  [[ " $* " == *model.moe.router=* ]] && router=()
  local cmd=("$ECO_TRAIN" cfg.yaml "${common[@]}" "${router[@]}" --set train.out_dir="$WORK/$name" "$@")
  [ "$np" -gt 1 ] && cmd=("${MPI[@]}" -np "$np" "${cmd[@]}" --set parallel.dp="$dp" --set parallel.ep="$ep")
  "${cmd[@]}" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name: exit $?"; }
}

for router in sigmoid_bias softmax_topk; do
  for t in fp8-eco-sr fp32; do
    declare -n r_args=$router
    run "dp2_${router}_$t" 2 1 "${r_args[@]}" --set precision.treatment=$t
    run "ep2_${router}_$t" 1 2 "${r_args[@]}" --set precision.treatment=$t
    same "dp2_${router}_$t" "ep2_${router}_$t"
  done
done
grep -q "rank 0) holds experts \[0, 2) of 4" ep2_sigmoid_bias_fp8-eco-sr.log ||
  fail "the ep 2 log does not say which experts rank 0 holds"

# A llama-family SMoE: SwiGLU experts (no biases), a shared expert, and a capacity factor that
# drops tokens (padding and dropped slots cross the exchange as they are).
llama=(--set model.family=llama --set model.moe.n_shared_experts=1 --set model.moe.capacity_factor=1.0)
run dp2_llama 2 1 "${llama[@]}" "${softmax_topk[@]}"
run ep2_llama 1 2 "${llama[@]}" "${softmax_topk[@]}"
same dp2_llama ep2_llama
grep -Eq "dropped [1-9]" ep2_llama.log || fail "the capacity factor dropped no token: drops untested"

# 4 ranks: ep 2 x dp 2 against dp 4 (expert gradients folded over the world in rank order).
run dp4 4 1
run ep2dp2 2 2
same dp4 ep2dp2
# ep 4 (one expert a rank) against dp 4.
run ep4 1 4
same dp4 ep4

# Gradient accumulation: every source's sum over micro-batches is kept apart, as at ep 1.
run dp2_accum 2 1 --set train.grad_accum=2
run ep2_accum 1 2 --set train.grad_accum=2
same dp2_accum ep2_accum

# parallel.overlap: each block's dense gradient sum on a worker thread during the backward, the
# token exchanges meanwhile on the main thread (MPI_THREAD_MULTIPLE); the same bits.
run ep2dp2_overlap 2 2 --set parallel.overlap=true
grep -q "gradient sums overlap the backward: each block's dense parameters'" ep2dp2_overlap.log ||
  { grep "gradient sums" ep2dp2_overlap.log; fail "ep 2 x dp 2 did not overlap the gradient sums"; }
same dp4 ep2dp2_overlap
python3 -c "import json, sys; o = json.load(open(sys.argv[1]))['parallel']['overlap']; assert o == 'worker thread', o" \
  "$WORK/ep2dp2_overlap/summary.json" || fail "summary.json does not say the sums overlapped"
python3 -c "import json, sys; o = json.load(open(sys.argv[1]))['parallel']['overlap']; assert o == 'off', o" \
  "$WORK/dp4/summary.json" || fail "summary.json says dp4's sums overlapped"
run ep2_accum_overlap 1 2 --set train.grad_accum=2 --set parallel.overlap=true
same dp2_accum ep2_accum_overlap
echo "ok: overlapped dense gradient sums under expert parallelism keep the bits"
# A rank that stops while the worker sums and the main thread exchanges tokens (two collectives
# open at once, MPI_THREAD_MULTIPLE): the collective timeout still ends the run.
signal_a_rank ep2_overlap_stopped STOP "${sigmoid_bias[@]}" --set parallel.ep=2 \
  --set parallel.overlap=true --set parallel.timeout_s=3
grep -q "has waited 3 s for the other ranks (parallel.timeout_s 3)" ep2_overlap_stopped.log ||
  { cat ep2_overlap_stopped.log; fail "ep 2 overlapped: no timeout line"; }
echo "ok: a stopped rank ended the ep 2 overlapped run in $took s (mpirun exit $rc): $(grep -o '[a-z_]* ([^)]*) has waited' ep2_overlap_stopped.log | head -1)"

# The control: the same ranks and sections, the selection bias moving twice as fast: another
# training, and eco-ckpt diff says so.
run control 1 2 --set model.moe.bias_update_rate=0.02
if "$CKPT" diff "$WORK/dp2_sigmoid_bias_fp8-eco-sr/ckpt_00000010.bin" \
  "$WORK/control/ckpt_00000010.bin" >diff_control.txt; then
  fail "the control run equals the dp 2 run: the comparison cannot fail"
fi
echo "ok: the control differs ($(tail -1 diff_control.txt))"

# Each rank stores half the experts: the plan's expert codes (quantize: experts) are halved.
dp_plan=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "${sigmoid_bias[@]}" \
  --set parallel.dp=2 --plan 2>&1) || { echo "$dp_plan"; fail "--plan (dp 2) failed"; }
codes() { awk '$1 == "quant_codes" {print $2}' <<<"$1"; }
[ "$(codes "$probe")" -gt 0 ] && [ $(($(codes "$probe") * 2)) -eq "$(codes "$dp_plan")" ] ||
  fail "ep 2's plan holds $(codes "$probe") bytes of expert codes, dp 2's $(codes "$dp_plan"): not half"
echo "ok: ep 2 holds $(codes "$probe") bytes of expert codes a rank, dp 2 $(codes "$dp_plan")"

# Checkpoints hold every expert, whatever the placement: ep 2 -> dp 2 and dp 2 -> ep 2.
run ck_ep2 1 2 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5
run ck_dp2 2 1 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5
"$CKPT" diff "$WORK/ck_ep2/ckpt_00000005.bin" "$WORK/ck_dp2/ckpt_00000005.bin" >diff_ck5.txt ||
  { cat diff_ck5.txt; fail "the step-5 checkpoints of ep 2 and dp 2 differ"; }
mkdir -p "$WORK/ep2_to_dp2" "$WORK/dp2_to_ep2"
cp "$WORK/ck_ep2/ckpt_00000005.bin" "$WORK/ep2_to_dp2/"
cp "$WORK/ck_dp2/ckpt_00000005.bin" "$WORK/dp2_to_ep2/"
run ep2_to_dp2 2 1 --resume
run dp2_to_ep2 1 2 --resume
grep -q "resumed from .*ckpt_00000005.bin at step 5" ep2_to_dp2.log || fail "ep2 -> dp2 did not resume"
grep -q "resumed from .*ckpt_00000005.bin at step 5" dp2_to_ep2.log || fail "dp2 -> ep2 did not resume"
same ep2_to_dp2 dp2_sigmoid_bias_fp8-eco-sr
same dp2_to_ep2 dp2_sigmoid_bias_fp8-eco-sr
echo "ok: ep checkpoints hold every expert; resumed ep 2 -> dp 2 and back byte for byte"

# summary.json: the token exchange's bytes.
python3 - "$WORK/ep2_sigmoid_bias_fp8-eco-sr/summary.json" <<'PY' || fail "summary.json's ep figures"
import json, sys
p = json.load(open(sys.argv[1]))["parallel"]
assert p["ep"] == 2 and p["world"] == 2, p
assert p["bytes_sent"]["all_to_all"] > 0, p
print(f"ok: ep 2 sent {p['bytes_sent']['all_to_all']} bytes all-to-all")
PY

# parallel.ep_row_factor sizes an owner's expert rows below the worst case: a factor that fits
# keeps the bits; 1 (the balanced load exactly) overflows in some layer and step of this run,
# whose buffers then grow (a warning naming the layer, the rows and the factor that would have
# held them), and the bits are still the same.
run ep2_rows15 1 2 --set parallel.ep_row_factor=1.5
same ep2_sigmoid_bias_fp8-eco-sr ep2_rows15
run ep2_rows1 1 2 --set parallel.ep_row_factor=1
grep -q "step [0-9]*: layer [0-9]* routed [0-9]* rows to the experts of rank [01] .* grew them to [0-9]* rows .* a factor of [0-9.]* would have held them" \
  ep2_rows1.log || { cat ep2_rows1.log; fail "ep_row_factor 1: no buffer grew (or no warning said so)"; }
same ep2_sigmoid_bias_fp8-eco-sr ep2_rows1
echo "ok: ep_row_factor 1.5 keeps the bits; 1 overflows, its buffers grow ($(grep -c 'grew them' ep2_rows1.log) warnings), the same bits"

# device: cuda with ep > 1 plans with the CUDA layout (training it: e2e data_parallel_cuda).
cuda_plan=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "${sigmoid_bias[@]}" \
  --set parallel.ep=2 --set device=cuda --plan 2>&1) || { echo "$cuda_plan"; fail "--plan of ep 2 on cuda"; }
grep -q "expert parallelism: each rank holds 2 of the 4 routed experts" <<<"$cuda_plan" ||
  { echo "$cuda_plan"; fail "--plan of ep 2 on cuda says nothing of ep"; }
echo "ok: ep 2 on device: cuda plans"
