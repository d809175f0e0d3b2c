# A run of 2N steps and a run resumed from its step-N checkpoint give bit-identical losses
# (parameters, moments and the data position are all restored exactly), for the fp32 reference
# and for an FP8 ECO treatment with stochastic rounding (codes, scales and SR streams).
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
for treatment in fp32 fp8-eco-sr; do
rm -rf "$WORK/full" "$WORK/resumed"
tiny_config >cfg.yaml
echo "precision: {treatment: $treatment}" >>cfg.yaml
common=(--set train.max_steps=12 --set train.checkpoint_interval=6 --set train.keep_checkpoints=5 --set train.sample_tokens=0)
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/full" >full.log 2>&1 || { cat full.log; fail "full run failed"; }
# Second run: stop after 6 steps (interrupt by SIGINT is not deterministic, so start from the
# full run's step-6 checkpoint in a fresh directory, exactly as a crashed run would be resumed).
mkdir -p "$WORK/resumed"
cp "$WORK/full/ckpt_00000006.bin" "$WORK/resumed/"
"$ECO_TRAIN" cfg.yaml "${common[@]}" --set train.out_dir="$WORK/resumed" --resume >resumed.log 2>&1 || { cat resumed.log; fail "resumed run failed"; }
grep -q "resumed from .*ckpt_00000006.bin at step 6" resumed.log || fail "did not resume at step 6"
python3 - "$WORK" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    out = {}
    for line in open(f"{d}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if "train_loss" in r: out[r["step"]] = r["train_loss"]
    return out
full, res = losses("full"), losses("resumed")
steps = [s for s in range(7, 13)]
for s in steps:
    assert s in res, f"resumed run has no step {s}"
    assert full[s] == res[s], f"step {s}: full {full[s]!r} != resumed {res[s]!r}"
def sections(path):
    # The checkpoint format of src/train/checkpoint.cpp.
    import struct
    b = open(path, "rb").read(); pos = 8 + 4 + 8 + 8
    def s():
        nonlocal pos
        n, = struct.unpack_from("<Q", b, pos); pos += 8 + n; return b[pos - n:pos]
    s(); s()
    count, = struct.unpack_from("<I", b, pos); pos += 4
    out = {}
    for _ in range(count):
        name = s().decode(); out[name] = s()
    return out
a, b = sections(f"{d}/full/ckpt_00000012.bin"), sections(f"{d}/resumed/ckpt_00000012.bin")
assert set(a) == set(b) and {"wte", "wte.m", "wte.v"} <= set(a), sorted(a)
for k in a:
    assert a[k] == b[k], f"final checkpoint section {k} differs"
print("resume is bit-exact for steps", steps)
PY
echo "$treatment: ok"
done
