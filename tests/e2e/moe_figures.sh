# The MoE figures (metrics.jsonl's and summary.json's moe block) are the step's: every
# micro-batch on every rank, so equal trainings at different splits report the same block. An SMoE
# whose capacity drops tokens, one rank accumulating 2 micro-batches, 2 data-parallel ranks and 2
# expert-parallel ranks: the same loads, dropped slots, aux and z losses and entropy at every
# logged step, and every layer's loads sum to the step's slots (tokens x top_k).
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
echo "moe_figures: all cases passed"
