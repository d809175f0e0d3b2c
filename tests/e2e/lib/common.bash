# Shared helpers for the end-to-end tests. Each test is run as: bash TEST.sh ECO_TRAIN SOURCE_DIR
set -euo pipefail
ECO_TRAIN=$1
SRC=$2
WORK=$(mktemp -d /tmp/eco-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# A tiny config on the synthetic corpus; extra YAML lines may be appended by the caller.
tiny_config() {
  cat <<YAML
model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}
data: {source: synthetic}
optim: {lr: 3.0e-3, warmup_steps: 2}
train: {batch_size: 4, max_steps: 8, log_interval: 1, eval_batches: 2, sample_tokens: 8, out_dir: $WORK/run}
YAML
}

# expect_error CODE SUBSTRING -- COMMAND...: the command must exit with CODE, print exactly one
# line on stderr containing SUBSTRING, and not crash.
expect_error() {
  local code=$1 needle=$2
  shift 3
  local out rc=0
  out=$("$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = "$code" ] || fail "expected exit $code, got $rc from: $* -- stderr: $out"
  grep -qF -- "$needle" <<<"$out" || fail "stderr lacks '$needle': $out"
  [ "$(grep -c . <<<"$out")" = 1 ] || fail "expected one line of error, got: $out"
  echo "ok: exit $rc: $out"
}

# mpi_setup: for the multi-rank tests: skips (77) without mpirun, sets CKPT (eco-ckpt beside
# eco-train) and MPI (the mpirun command line for any user and core count).
mpi_setup() {
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt-get install openmpi-bin)"; exit 77; }
  CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
  [ -x "$CKPT" ] || fail "no eco-ckpt beside $ECO_TRAIN"
  MPI=(mpirun --oversubscribe --allow-run-as-root)
  export OMPI_MCA_rmaps_base_oversubscribe=1
}

# same A B: the final (step 10) checkpoints of runs $WORK/A and $WORK/B are equal (eco-ckpt diff).
same() {
  "$CKPT" diff "$WORK/$1/ckpt_00000010.bin" "$WORK/$2/ckpt_00000010.bin" >"diff_$1_$2.txt" ||
    { cat "diff_$1_$2.txt"; fail "$1 and $2 differ"; }
  echo "ok: $1 == $2 ($(tail -1 "diff_$1_$2.txt"))"
}

# signal_a_rank NAME SIG ARGS...: 2 ranks of eco-train cfg.yaml "${common[@]}" ARGS (ARGS set
# parallel.dp / ep) train a long run into $WORK/NAME; once it logs a step, the highest-numbered
# rank gets SIG. Every process must be gone within 60 s and mpirun exit non-zero; sets `took`
# (seconds) and `rc` (mpirun's exit code).
signal_a_rank() {
  local name=$1 sig=$2
  shift 2
  "${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" "$@" \
    --set train.max_steps=1000000 --set train.log_interval=1000 --set train.out_dir="$WORK/$name" \
    >"$name.log" 2>&1 &
  local launcher=$! victim=""
  for _ in $(seq 100); do
    victim=$(pgrep -f "eco-train cfg.yaml.*$WORK/$name" | sort -n | tail -1 || true)
    [ -n "$victim" ] && grep -q "step " "$name.log" 2>/dev/null && break
    sleep 0.1
  done
  [ -n "$victim" ] || { cat "$name.log"; fail "$name: no rank to signal"; }
  kill "-$sig" "$victim"
  local start
  start=$(date +%s)
  while kill -0 "$launcher" 2>/dev/null && [ $(( $(date +%s) - start )) -lt 60 ]; do sleep 0.2; done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -CONT "$victim"; kill -9 "$launcher"; fail "$name: mpirun still running 60 s after SIG$sig"
  fi
  rc=0
  wait "$launcher" || rc=$?
  took=$(( $(date +%s) - start ))
  [ "$rc" != 0 ] || fail "$name: mpirun exited 0 after SIG$sig to a rank"
  if pgrep -f "eco-train cfg.yaml.*$WORK/$name" >/dev/null; then fail "$name: a rank was left behind"; fi
}

