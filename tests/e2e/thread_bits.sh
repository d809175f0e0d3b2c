# A CPU run's bits do not depend on train.threads where the BLAS's sgemm allows it. Our kernels
# split work by rows, heads and channel blocks and sum in a fixed order for any thread count;
# OpenBLAS 0.3.21's AVX-512 sgemm (SkylakeX, Cooperlake) gives the same bits on 1 and 2 threads
# once cpu::gemm cuts long odd reductions (kernels/cpu/gemm.h). Its Haswell and Zen kernels
# partition by the threads whatever the shape: there this test says so and skips (77).
# Runs with the core eco-train picks for this CPU (the user's OPENBLAS_CORETYPE removed): 1 thread
# against 2, 6 steps of fp8-eco-sr, a GPT-2, a Llama and a GPT-2 SMoE (whose expert segments give
# reductions of any length); the final checkpoints must be equal section by section.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
[ -x "$CKPT" ] || fail "no eco-ckpt beside $ECO_TRAIN"
tiny_config >cfg.yaml
# Shapes large enough that OpenBLAS threads its sgemm (512 token rows, d 128; the tiny config's
# 64 rows run on one thread whatever the setting).
common=(--set train.max_steps=6 --set train.sample_tokens=0 --set train.eval_interval=0
  --set precision.treatment=fp8-eco-sr --set model.d_model=128 --set model.n_head=4
  --set model.seq_len=64 --set train.batch_size=8)
declare -A models=(
  [gpt2]=""
  [llama]="--set model.family=llama"
  [smoe]="--set model.moe.n_experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=256 --set precision.quantize=experts"
)
for m in gpt2 llama smoe; do
  read -ra extra <<<"${models[$m]}"
  for t in 1 2; do
    env -u OPENBLAS_CORETYPE "$ECO_TRAIN" cfg.yaml "${common[@]}" "${extra[@]}" \
      --set train.threads="$t" --set train.out_dir="$WORK/${m}_$t" >"${m}_$t.log" 2>&1 ||
      { cat "${m}_$t.log"; fail "$m on $t threads failed"; }
  done
  core=$(grep -oE 'BLAS: OpenBLAS [^ ]+ \([A-Za-z]+\), core [A-Za-z0-9_]+' "${m}_1.log" | awk '{print $NF}')
  [ -n "$core" ] || { cat "${m}_1.log"; fail "no BLAS line"; }
  if [[ $core != SkylakeX && $core != Cooperlake ]]; then
    echo "SKIP: OpenBLAS core $core: its sgemm's bits depend on the threads' partition"
    exit 77
  fi
  "$CKPT" diff "$WORK/${m}_1/ckpt_00000006.bin" "$WORK/${m}_2/ckpt_00000006.bin" >"diff_$m.txt" ||
    { cat "diff_$m.txt"; fail "$m: 1 and 2 threads differ (OpenBLAS core $core)"; }
  echo "ok: $m: 1 thread == 2 threads ($(tail -1 "diff_$m.txt"); OpenBLAS core $core)"
done
