# The collective timeout's phases under mpirun -np 2 (docs/errors.md): a rank that stops during
# start-up (before MPI_Init, or before the ranks compare their configs) ends the job within
# ECO_STARTUP_TIMEOUT_S with one line naming MPI start-up and the bound; a checkpoint slower
# than parallel.timeout_s does not end a healthy run (it waits under parallel.phase_timeout_s),
# and one slower than parallel.phase_timeout_s ends it with a line naming the checkpoint phase.
# The faults are the test hooks ECO_TEST_STALL_AT and ECO_TEST_SLOW_CHECKPOINT_S
# (src/core/test_faults.h). Skips (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
tiny_config >cfg.yaml
common=(--set parallel.dp=2 --set train.batch_size=2 --set train.sample_tokens=0
  --set train.threads=1 --set train.max_steps=4)

probe=$("${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" --plan 2>&1) || {
  grep -q "built without MPI" <<<"$probe" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "$probe"; fail "mpirun -np 2 eco-train --plan failed"; }

# launch NAME LIMIT ARGS...: mpirun -np 2 eco-train cfg.yaml ARGS into $WORK/NAME, ended by
# `timeout` after LIMIT s (so a hang fails the test rather than blocking it); sets rc and took.
# A process a hook stopped (its pid on the log) that is still there 30 s after mpirun is
# killed, and the test fails.
launch() {
  local name=$1 limit=$2
  shift 2
  local start
  start=$(date +%s)
  rc=0
  timeout -k 10 "$limit" "${MPI[@]}" -np 2 "$ECO_TRAIN" cfg.yaml "${common[@]}" \
    --set train.out_dir="$WORK/$name" "$@" >"$name.log" 2>&1 || rc=$?
  took=$(( $(date +%s) - start ))
  local pid
  for pid in $(sed -n 's/^eco-train: test: rank [0-9]* (pid \([0-9]*\)) stops.*/\1/p' "$name.log"); do
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done  # 30 s
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid"
      fail "$name: the stopped rank (pid $pid) was left behind"
    fi
  done
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { cat "$name.log"; fail "$name: still running after $limit s"; }
}

# A rank stopped before MPI_Init: the other waits in MPI_Init (or, where the library's MPI_Init
# does not wait for every rank, in the first collective), under ECO_STARTUP_TIMEOUT_S.
export ECO_STARTUP_TIMEOUT_S=5
ECO_TEST_STALL_AT=mpi_init:1 launch stall_mpi_init 120
[ "$rc" != 0 ] || { cat stall_mpi_init.log; fail "a rank stopped before MPI_Init: mpirun exit 0"; }
grep -qE "\[rank 0/2\] (MPI_Init|all_gather) has waited 5 s for the other ranks \(ECO_STARTUP_TIMEOUT_S 5\) during MPI start-up" stall_mpi_init.log ||
  { cat stall_mpi_init.log; fail "no start-up timeout line for a rank stopped before MPI_Init"; }
echo "ok: a rank stopped before MPI_Init ended the job in $took s (mpirun exit $rc)"

# A rank stopped after MPI_Init, before the first collective (the ranks' config check): the
# config is not agreed yet, so the start-up bound applies, not parallel.timeout_s.
ECO_TEST_STALL_AT=agreement:1 launch stall_agreement 120 --set parallel.timeout_s=0
[ "$rc" != 0 ] || { cat stall_agreement.log; fail "a rank stopped at start-up: mpirun exit 0"; }
grep -q "\[rank 0/2\] all_gather has waited 5 s for the other ranks (ECO_STARTUP_TIMEOUT_S 5) during MPI start-up" stall_agreement.log ||
  { cat stall_agreement.log; fail "no start-up timeout line for a rank stopped before the first collective"; }
echo "ok: a rank stopped before the first collective ended the job in $took s (mpirun exit $rc)"

# A start-up bound that is not a number of seconds is refused.
ECO_STARTUP_TIMEOUT_S=soon launch bad_startup 120
[ "$rc" != 0 ] || fail "ECO_STARTUP_TIMEOUT_S=soon: mpirun exit 0"
grep -q "ECO_STARTUP_TIMEOUT_S 'soon': expected 0 (wait forever) or seconds in (0, 1e7]" bad_startup.log ||
  { cat bad_startup.log; fail "ECO_STARTUP_TIMEOUT_S=soon not refused"; }
echo "ok: ECO_STARTUP_TIMEOUT_S=soon refused"
unset ECO_STARTUP_TIMEOUT_S

# Rank 0 writes each checkpoint 6 s slower than parallel.timeout_s (2 s): rank 1 waits for it
# under parallel.phase_timeout_s (3600 s by default) and the run finishes.
ECO_TEST_SLOW_CHECKPOINT_S=8 launch slow_ckpt 300 --set parallel.timeout_s=2 \
  --set train.checkpoint_interval=2
[ "$rc" = 0 ] || { cat slow_ckpt.log; fail "checkpoints slower than parallel.timeout_s ended the run (exit $rc)"; }
[ -f "$WORK/slow_ckpt/ckpt_00000002.bin" ] && [ -f "$WORK/slow_ckpt/ckpt_00000004.bin" ] &&
  [ -f "$WORK/slow_ckpt/summary.json" ] || fail "the slow-checkpoint run lacks its checkpoints or summary"
[ "$took" -ge 16 ] || fail "the slow-checkpoint run took $took s: the checkpoints were not slow"
echo "ok: 8 s checkpoints under parallel.timeout_s 2 did not end the run ($took s, exit 0)"

# A checkpoint slower than parallel.phase_timeout_s: rank 1 gives up, naming the phase and key.
ECO_TEST_SLOW_CHECKPOINT_S=300 launch stuck_ckpt 200 --set parallel.timeout_s=2 \
  --set parallel.phase_timeout_s=5 --set train.checkpoint_interval=2
[ "$rc" != 0 ] || { cat stuck_ckpt.log; fail "a checkpoint past parallel.phase_timeout_s: mpirun exit 0"; }
grep -q "\[rank 1/2\] broadcast has waited 5 s for the other ranks (parallel.phase_timeout_s 5) while rank 0 writes a checkpoint" stuck_ckpt.log ||
  { cat stuck_ckpt.log; fail "no checkpoint-phase timeout line"; }
[ "$took" -lt 150 ] || fail "a checkpoint past parallel.phase_timeout_s 5 took $took s to end the job"
echo "ok: a checkpoint past parallel.phase_timeout_s ended the job in $took s (mpirun exit $rc)"
echo "rank_timeouts: all cases passed"
