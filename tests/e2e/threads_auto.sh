# Sharing a busy machine. eco-train starts OpenMP with a bounded spin (GOMP_SPINCOUNT=10000) unless
# the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, and says which in its BLAS line; the re-executed
# process carries the setting in its environment. train.threads: auto takes the cores other
# processes leave free: beside one busy loop per core it takes 1 thread, and its checkpoint
# equals a run's on train.threads: 1 section by section.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
CKPT=$(dirname "$ECO_TRAIN")/eco-ckpt
[ -x "$CKPT" ] || fail "no eco-ckpt beside $ECO_TRAIN"
tiny_config >cfg.yaml
common=(--set train.max_steps=4 --set train.sample_tokens=0 --set train.eval_interval=0)

unset OMP_WAIT_POLICY GOMP_SPINCOUNT  # ctest sets OMP_WAIT_POLICY for the suite
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/plain" >plain.log 2>&1 ||
  { cat plain.log; fail "plain run failed"; }
grep -q "OpenMP waits: spin 10000 then sleep (default)" plain.log ||
  { cat plain.log; fail "no default OpenMP wait line"; }
OMP_WAIT_POLICY=passive "$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/user" \
  >user.log 2>&1 || { cat user.log; fail "run with OMP_WAIT_POLICY failed"; }
grep -q "OpenMP waits: OMP_WAIT_POLICY=passive (set by the user)" user.log ||
  { cat user.log; fail "the user's OMP_WAIT_POLICY not named"; }
echo "ok: $(grep -oE 'OpenMP waits: .*' plain.log) / $(grep -oE 'OpenMP waits: .*' user.log)"

# The setting reaches the running process (libgomp reads it at load: the re-exec carries it).
"$ECO_TRAIN" cfg.yaml --set train.max_steps=100000 --set train.log_interval=1000 \
  --set train.out_dir="$WORK/long" >long.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "step " long.log && break; sleep 0.1; done
env_of_run=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null || true)
kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
grep -qx "GOMP_SPINCOUNT=10000" <<<"$env_of_run" || fail "GOMP_SPINCOUNT=10000 not in the run's environment"
echo "ok: the running process has GOMP_SPINCOUNT=10000"

cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the affinity mask
if [ "$cores" -lt 2 ]; then
  echo "SKIP: one core: auto has nothing to leave out"
  exit 77
fi
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
for _ in $(seq 1 "$cores"); do (while :; do :; done) & pids+=($!); done
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.threads=auto --set train.out_dir="$WORK/auto" \
  >auto.log 2>&1 || { cat auto.log; fail "auto run failed"; }
kill "${pids[@]}" 2>/dev/null; pids=()
line=$(grep -oE "threads: auto: .*" auto.log) || { cat auto.log; fail "no 'threads: auto' line"; }
[[ $line == "threads: auto: 1 of $cores cores: "* ]] || fail "beside $cores busy loops: $line"
grep -q "accum), 1 threads" auto.log || { cat auto.log; fail "the run did not train on 1 thread"; }
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.threads=1 --set train.out_dir="$WORK/one" \
  >one.log 2>&1 || { cat one.log; fail "threads 1 run failed"; }
"$CKPT" diff "$WORK/auto/ckpt_00000004.bin" "$WORK/one/ckpt_00000004.bin" >diff.txt ||
  { cat diff.txt; fail "the auto run's checkpoint differs from the threads: 1 run's"; }
echo "ok: $line; its checkpoint == threads: 1's"
