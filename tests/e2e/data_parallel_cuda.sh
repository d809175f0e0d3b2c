# Data parallelism on the GPU: 2 ranks on device: cuda (sharing one GPU when there is
# one) end byte-identical to one rank accumulating 2 micro-batches, under bf16-mw and fp8-eco-sr
# (every block linear's forward the FP8 GEMM). The gradients are summed over MPI through host
# memory in rank order. Skips (77) without mpirun, without MPI or CUDA in the build, or without
# a GPU: scripts/dev/gpu_check.sh runs it on a GPU machine. ZeRO-1 (zero: 1) on 2 CUDA ranks, its
# codes and scales all-gathered through host memory, ends byte-identical too, and so does
# expert parallelism (ep 2) against dp 2 on a sparse MoE whose every expert GEMM takes the FP8
# path (16-row segments). Where each rank has its own GPU the same runs go GPU to GPU over NCCL
# (the gradient sums, ZeRO-1's all-gather, the ep run's token exchange, parallel.overlap's sums on
# the side stream); the ep and overlap lines say which way the data went, from the run log.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
[ -x "$CKPT" ] || fail "no eco-ckpt beside $ECO_TRAIN"
MPI=(mpirun --oversubscribe --allow-run-as-root)
tiny_config >cfg.yaml
echo "device: cuda" >>cfg.yaml
common=(--set train.max_steps=10 --set train.batch_size=2 --set train.sample_tokens=0
  --set train.log_interval=5)
probe=$("$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.max_steps=1 --set train.out_dir="$WORK/probe" 2>&1) || {
  grep -qE "no CUDA GPU is visible|without CUDA|built without|no CUDA backend" <<<"$probe" &&
    { echo "SKIP: no GPU or no CUDA build: $(tail -1 <<<"$probe")"; exit 77; }
  echo "$probe"; fail "one CUDA step failed"; }
run() {
  local name=$1 np=$2
  shift 2
  local cmd=("$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/$name" "$@")
  [ "$np" -gt 1 ] && cmd=("${MPI[@]}" -np "$np" "${cmd[@]}" --set parallel.dp="$np")
  "${cmd[@]}" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name: exit $?"; }
}
for t in bf16-mw fp8-eco-sr; do
  run "one_$t" 1 --set precision.treatment="$t" --set train.grad_accum=2
  run "dp2_$t" 2 --set precision.treatment="$t"
  "$CKPT" diff "$WORK/one_$t/ckpt_00000010.bin" "$WORK/dp2_$t/ckpt_00000010.bin" >"diff_$t.txt" ||
    { cat "diff_$t.txt"; fail "$t: 2 CUDA ranks differ from one rank accumulating 2"; }
  echo "ok: $t on CUDA, 2 ranks == 1 rank x 2 micro-batches ($(tail -1 "diff_$t.txt"))"
done
# parallel.overlap: over NCCL (a GPU per rank) the sums run on the side stream during the
# backward; through host memory (ranks sharing a GPU) they run after it. The same bits either way.
run dp2_overlap 2 --set precision.treatment=fp8-eco-sr --set parallel.overlap=true
"$CKPT" diff "$WORK/one_fp8-eco-sr/ckpt_00000010.bin" "$WORK/dp2_overlap/ckpt_00000010.bin" \
  >diff_overlap.txt || { cat diff_overlap.txt; fail "overlapped sums on 2 CUDA ranks differ"; }
how=$(grep -o "gradient sums overlap the backward: .* by NCCL on a second CUDA stream\|gradient sums after the backward ([^)]*)" dp2_overlap.log | head -1 || true)
[ -n "$how" ] || { cat dp2_overlap.log; fail "dp2_overlap: the log does not say how the sums ran"; }
echo "ok: fp8-eco-sr on CUDA with parallel.overlap, 2 ranks == 1 rank x 2 micro-batches: $how"
rm -rf "$WORK/dp2_fp8-eco-sr"
run dp2_fp8-eco-sr 2 --set precision.treatment=fp8-eco-sr --set parallel.zero=1
"$CKPT" diff "$WORK/one_fp8-eco-sr/ckpt_00000010.bin" "$WORK/dp2_fp8-eco-sr/ckpt_00000010.bin" \
  >diff_zero1.txt || { cat diff_zero1.txt; fail "ZeRO-1 on 2 CUDA ranks differs from one rank"; }
echo "ok: fp8-eco-sr ZeRO-1 on CUDA, 2 ranks == 1 rank x 2 micro-batches ($(tail -1 diff_zero1.txt))"
# Expert parallelism on CUDA: ep 2 against dp 2 (both 2 ranks), an SMoE with quantized experts.
moe=(--set precision.treatment=fp8-eco-sr --set precision.quantize=experts --set model.d_model=64
  --set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=64)
run dp2_moe 2 "${moe[@]}"
"${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "${moe[@]}" --set train.out_dir="$WORK/ep2_moe" \
  --set parallel.dp=1 --set parallel.ep=2 >ep2_moe.log 2>&1 || { cat ep2_moe.log; fail "ep2_moe: exit $?"; }
"$CKPT" diff "$WORK/dp2_moe/ckpt_00000010.bin" "$WORK/ep2_moe/ckpt_00000010.bin" >diff_ep.txt ||
  { cat diff_ep.txt; fail "ep 2 on CUDA differs from dp 2"; }
exchange=$(grep -o 'expert exchange: [A-Za-z-]*' ep2_moe.log | head -1 || true)
[ -n "$exchange" ] || { cat ep2_moe.log; fail "ep2_moe: the log does not say how tokens moved"; }
echo "ok: SMoE fp8-eco-sr on CUDA, ep 2 == dp 2, tokens ${exchange#expert exchange: }" \
  "($(tail -1 diff_ep.txt))"
