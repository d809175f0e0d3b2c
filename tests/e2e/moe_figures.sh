# The MoE figures (metrics.jsonl's and summary.json's moe block) are the step's: every
# micro-batch on every rank, so equal trainings at different splits report the same block. An SMoE
# whose capacity drops tokens, one rank accumulating 2 micro-batches, 2 data-parallel ranks and 2
# expert-parallel ranks: the same loads, dropped slots, aux and z losses and entropy at every
# logged step, and every layer's loads sum to the step's slots (tokens x top_k). The ep 2 run's
# summary rebuilt after a kill right after its final checkpoint equals it key for key.
# Skips (77) without mpirun or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
common=("$SRC/configs/smoe-tiny-cpu.yaml" --set train.max_steps=6 --set train.log_interval=2
  --set train.eval_interval=0 --set train.eval_batches=1 --set train.sample_tokens=0
  --set model.moe.capacity_factor=1.0 --set train.threads=1)

probe=$("${MPI[@]}" -np 2 "$ECO_TRAIN" "${common[@]}" --set parallel.dp=2 --plan 2>&1) || {
  grep -q "built without MPI" <<<"$probe" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "$probe"; fail "mpirun -np 2 eco-train --plan failed"; }

"$ECO_TRAIN" "${common[@]}" --set train.grad_accum=2 --set train.out_dir="$WORK/accum" >accum.log 2>&1 ||
  { cat accum.log; fail "accum: exit $?"; }
"${MPI[@]}" -np 2 "$ECO_TRAIN" "${common[@]}" --set parallel.dp=2 --set train.out_dir="$WORK/dp2" >dp2.log 2>&1 ||
  { cat dp2.log; fail "dp2: exit $?"; }
"${MPI[@]}" -np 2 "$ECO_TRAIN" "${common[@]}" --set parallel.ep=2 --set train.out_dir="$WORK/ep2" >ep2.log 2>&1 ||
  { cat ep2.log; fail "ep2: exit $?"; }
python3 - "$WORK" <<'PY'
import json, sys
d = sys.argv[1]
def figures(run):
    per_step = {r["step"]: r["moe"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "moe" in r}
    return per_step, json.load(open(f"{d}/{run}/summary.json"))["moe"]
accum, accum_summary = figures("accum")
assert sorted(accum) == [1, 2, 4, 6], sorted(accum)
slots = 8 * 64 * 2 * 2  # batch x seq_len x 2 micro-batches x top_k
for step, m in accum.items():
    assert all(sum(layer) == slots for layer in m["layer_loads"]), (step, m["layer_loads"])
    assert m["load_mean"] == slots / 8, (step, m)
assert any(m["dropped"] > 0 for m in accum.values()), "the capacity factor dropped nothing"
assert accum_summary == accum[6], (accum_summary, accum[6])
for run in ("dp2", "ep2"):
    steps, summary = figures(run)
    assert steps == accum, f"{run}: {steps} != accum {accum}"
    assert summary == accum_summary, f"{run}: {summary} != {accum_summary}"
print("moe figures equal at steps", sorted(accum), "dropped", [accum[s]["dropped"] for s in sorted(accum)])
PY

# The summary rebuilt after a kill right after the final checkpoint (2 expert-parallel ranks) has
# every key of the uninterrupted one, and its values but for this process's wall clock and traffic.
cp -r ep2 ep2_killed
rm ep2_killed/summary.json
"${MPI[@]}" -np 2 "$ECO_TRAIN" "${common[@]}" --set parallel.ep=2 --set train.out_dir="$WORK/ep2_killed" --resume \
  >ep2_killed.log 2>&1 || { cat ep2_killed.log; fail "ep2_killed: exit $?"; }
python3 - ep2/summary.json ep2_killed/summary.json <<'PY'
import json, sys
def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out
a, b = (flat(json.load(open(p))) for p in sys.argv[1:3])
assert set(a) == set(b), sorted(set(a) ^ set(b))
measured = {"wall_s", "tokens_per_s"}
for k in a:
    if k not in measured and not k.startswith("parallel.bytes_sent"):
        assert a[k] == b[k], (k, a[k], b[k])
assert b["parallel.bytes_sent_per_step"] is None, b
print("ep 2 summary rebuilt key for key")
PY
echo "moe_figures: all cases passed"
