# Data parallelism over MPI: N ranks of one micro-batch each end with the training
# state (weights, FP8 codes and scales, m and v) byte-identical to one rank accumulating N
# micro-batches, under fp32, bf16-mw and fp8-eco-sr (2 ranks), a sigmoid_bias sparse MoE (2
# ranks: its bias balances on the loads summed over ranks) and fp8-eco-sr (4 ranks; 2 ranks of 2
# micro-batches; the gradient sums overlapping the backward or after it); a control
# that must differ (one rank, one micro-batch) shows the comparison can fail. A run resumes at
# another world size (2 ranks -> 1 rank accumulating 2, and back) byte for byte. The launch is
# checked too: a world that does not match parallel.dp, ranks whose configs differ, a rank
# killed with SIGKILL and a rank stopped with SIGSTOP (parallel.timeout_s): every process gone
# within 60 s, mpirun non-zero.
# Skips (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
tiny_config >cfg.yaml
echo "precision: {treatment: fp8-eco-sr}" >>cfg.yaml
common=(--set train.max_steps=10 --set train.batch_size=2 --set train.sample_tokens=0
  --set train.log_interval=5 --set train.threads=1)

probe=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" --set parallel.dp=2 --plan 2>&1) || {
  grep -q "built without MPI" <<<"$probe" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "$probe"; fail "mpirun -np 2 eco-train --plan failed"; }

# run NAME NP ARGS...: trains into $WORK/NAME with NP ranks (1: no mpirun).
run() {
  local name=$1 np=$2
  shift 2
  local cmd=("$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/$name" "$@")
  [ "$np" -gt 1 ] && cmd=("${MPI[@]}" -np "$np" "${cmd[@]}" --set parallel.dp="$np")
  "${cmd[@]}" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name: exit $?"; }
}

for t in fp32 bf16-mw fp8-eco-sr; do
  run "one_$t" 1 --set precision.treatment="$t" --set train.grad_accum=2
  run "dp2_$t" 2 --set precision.treatment="$t"
  same "one_$t" "dp2_$t"
done
# A sparse MoE whose sigmoid_bias router balances on the step's loads (summed over the ranks).
moe=(--set precision.treatment=fp8-eco-sr --set precision.quantize=experts
  --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=32
  --set model.moe.router=sigmoid_bias --set model.moe.bias_update_rate=0.01)
run one_moe 1 "${moe[@]}" --set train.grad_accum=2
run dp2_moe 2 "${moe[@]}"
same one_moe dp2_moe
run one4 1 --set train.grad_accum=4
run dp4 4
same one4 dp4
# parallel.overlap: the last micro-batch's gradients are summed block by block during the
# backward, on a worker thread; the bits equal the sum after the backward (the default), with
# and without gradient accumulation (the earlier micro-batches folded in per block), on 2 and 4
# ranks.
grep -q "gradient sums after the backward (parallel.overlap: false)" dp2_fp8-eco-sr.log ||
  { grep "gradient sums" dp2_fp8-eco-sr.log; fail "no log line saying the sums run after the backward"; }
run dp2_overlap 2 --set parallel.overlap=true
grep -q "gradient sums overlap the backward" dp2_overlap.log ||
  { grep "gradient sums" dp2_overlap.log; fail "2 ranks on the cpu did not overlap the gradient sums"; }
same one_fp8-eco-sr dp2_overlap
run dp4_overlap 4 --set parallel.overlap=true
same one4 dp4_overlap
# (2 ranks of 2 micro-batches sum ((0 + g0) + g1) + ((0 + g2) + g3) in rank order: another
# order than one rank's 4, so they are compared with each other.)
run dp2_acc2 2 --set train.grad_accum=2 --set parallel.overlap=true
run dp2_acc2_after 2 --set train.grad_accum=2
same dp2_acc2 dp2_acc2_after
echo "ok: overlapped gradient sums equal the sums after the backward, accumulation included"
# The control: one rank, one micro-batch a step, is a different training.
run control 1
if "$CKPT" diff "$WORK/control/ckpt_00000010.bin" "$WORK/dp2_fp8-eco-sr/ckpt_00000010.bin" \
  >diff_control.txt; then
  fail "the control run equals the 2-rank run: the comparison cannot fail"
fi
echo "ok: the control differs ($(tail -1 diff_control.txt))"
# Resume at another world size: the 2-rank run's step-5 checkpoint continued by one rank
# accumulating 2 micro-batches, and one rank's continued by 2 ranks, end byte-identical to the
# uninterrupted runs (the same micro-batches a step; dp x grad_accum must stay the same).
run ckpt5_dp2 2 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5
run ckpt5_one 1 --set train.checkpoint_interval=5 --set train.keep_checkpoints=5 --set train.grad_accum=2
mkdir -p "$WORK/to_one" "$WORK/to_dp2"
cp "$WORK/ckpt5_dp2/ckpt_00000005.bin" "$WORK/to_one/"
cp "$WORK/ckpt5_one/ckpt_00000005.bin" "$WORK/to_dp2/"
run to_one 1 --set train.grad_accum=2 --resume
run to_dp2 2 --resume
grep -q "resumed from .*ckpt_00000005.bin at step 5" to_one.log || fail "2 -> 1 did not resume at step 5"
same to_one dp2_fp8-eco-sr
same to_dp2 dp2_fp8-eco-sr
# Another number of micro-batches a step is another training: refused, naming both keys.
rc=0
out=$("$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/to_dp2" --resume 2>&1 >/dev/null) || rc=$?
[ "$rc" = 2 ] || fail "resuming 2 micro-batches a step with 1: exit $rc ($out)"
grep -q "parallel.dp x parallel.ep x train.grad_accum (micro-batches a step): 2 x 1 x 1 = 2 in the checkpoint, 1 x 1 x 1 = 1 now" <<<"$out" ||
  fail "no micro-batch mismatch error: $out"
echo "ok: resumed 2 ranks -> 1 and 1 -> 2 byte for byte; 2 micro-batches -> 1 refused"

# Only rank 0 writes and prints progress; the log gives the global batch.
[ "$(grep -c 'rank 1/2.*step' dp2_fp8-eco-sr.log)" = 0 ] || fail "rank 1 printed progress"

# The launch: the world must equal parallel.dp, on every rank, with one line each.
rc=0
out=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" 2>&1 >/dev/null) || rc=$?
[ "$rc" != 0 ] || fail "a world of 2 with parallel.dp 1 trained"
grep -q "parallel.dp 1 x parallel.ep 1 = 1 rank, but the world has 2 (launch 1: mpirun -np 1, or set parallel.dp: 2)" <<<"$out" ||
  fail "no parallel.dp error: $out"
echo "ok: world 2 with parallel.dp 1 refused (exit $rc)"
# Ranks with different configs (MPMD: rank 1 overrides the lr).
rc=0
out=$("${MPI[@]}" -np 1 "$ECO_TRAIN" cfg.yaml "${common[@]}" --set parallel.dp=2 \
  --set train.out_dir="$WORK/mpmd" : -np 1 "$ECO_TRAIN" cfg.yaml "${common[@]}" \
  --set parallel.dp=2 --set train.out_dir="$WORK/mpmd" --set optim.lr=1e-3 2>&1 >/dev/null) || rc=$?
[ "$rc" != 0 ] || fail "ranks with different configs trained"
grep -q "resolved config of rank(s) 1 differs from rank 0" <<<"$out" || fail "no mismatch error: $out"
echo "ok: a config differing between ranks refused (exit $rc)"

# A rank killed with SIGKILL: every process ends within 60 s and mpirun reports failure.
signal_a_rank killed KILL --set parallel.dp=2
echo "ok: a killed rank ended the run in $took s (mpirun exit $rc)"

# A rank that stops (SIGSTOP: alive, so the launcher sees nothing) leaves the other waiting in
# the gradients' sum: parallel.timeout_s ends the run with one line naming the collective.
signal_a_rank stopped STOP --set parallel.dp=2 --set parallel.timeout_s=3
grep -q "has waited 3 s for the other ranks (parallel.timeout_s 3)" stopped.log ||
  { cat stopped.log; fail "no timeout line"; }
echo "ok: a stopped rank ended the run in $took s by the collective timeout (mpirun exit $rc)"
