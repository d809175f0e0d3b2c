# Stop signals: SIGINT / SIGTERM are honoured within an eval batch, a sampled token or
# a micro-batch, not only between steps: the run saves the checkpoint of its last completed step
# and exits 130 (SIGINT) or 143 (SIGTERM). (A second signal exits at once: the unit test
# StopSignals.SecondSignalExitsAtOnce.)
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
cat >slow.yaml <<YAML
model: {family: gpt2, n_layer: 2, n_head: 4, d_model: 128, vocab_size: 256, seq_len: 64}
data: {source: synthetic}
train: {batch_size: 8, max_steps: 4, log_interval: 1, sample_tokens: 0}
YAML

# run_and_stop NAME SIGNAL WAIT_FOR EXPECTED_RC [--set ...]: starts a run in $WORK/NAME, sends
# SIGNAL once WAIT_FOR appears in its log, and checks that it exits with EXPECTED_RC within 10 s.
run_and_stop() {
  local name=$1 sig=$2 pattern=$3 want=$4
  shift 4
  "$ECO_TRAIN" slow.yaml --set train.out_dir="$WORK/$name" "$@" >"$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do grep -q -- "$pattern" "$name.log" && break; sleep 0.1; done
  grep -q -- "$pattern" "$name.log" || { kill -9 $pid; fail "$name: '$pattern' never appeared: $(tail -3 "$name.log")"; }
  sleep 0.5  # well inside the long evaluation / sample / step
  kill -"$sig" $pid
  for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    kill -9 $pid
    fail "$name: SIG$sig not honoured within 10 s"
  fi
  local rc=0
  wait $pid || rc=$?
  [ "$rc" = "$want" ] || fail "$name: exit $rc after SIG$sig, expected $want: $(tail -3 "$name.log")"
  echo "ok: $name: SIG$sig -> exit $rc"
}

# An evaluation of 10000 batches after step 2: SIGINT cuts it short, the step-2 checkpoint is saved.
run_and_stop eval INT "step      2/4" 130 --set train.eval_interval=2 --set train.eval_batches=10000
[ -f eval/ckpt_00000002.bin ] || fail "eval: no checkpoint of step 2: $(ls eval)"
grep -q "interrupted: saving a checkpoint at step 2" eval.log || fail "eval: $(tail -3 eval.log)"
# A sample of 100000 tokens after step 2: SIGTERM ends it, exit 143 after the checkpoint.
run_and_stop sample TERM "step      2/4" 143 --set train.sample_interval=2 --set train.sample_tokens=100000
[ -f sample/ckpt_00000002.bin ] || fail "sample: no checkpoint of step 2: $(ls sample)"
# A step of 16384 micro-batches: SIGINT abandons it (its update never applied); nothing new to save.
run_and_stop accum INT "training 4 steps" 130 --set train.grad_accum=16384
[ -z "$(ls accum/ckpt_*.bin 2>/dev/null)" ] || fail "accum: a checkpoint of an abandoned step was written"
echo "signals: all cases passed"
