# Shards are streamed, not loaded: the quickstart model trains 5 steps on a 400 MB train shard
# (200M uint16 tokens) and the process's peak resident memory stays under 250 MB, below the
# shard's size (a loader holding the tokens peaks above 1.2 GB: the file's uint16 and their int32
# copy). The peak is the child's ru_maxrss, read by a Python wrapper.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"

TOKENS=200000000
LIMIT_MB=250
free_mb=$(df -Pm "$WORK" | awk 'NR == 2 {print $4}')
if [ "$free_mb" -lt 1000 ]; then
  echo "SKIP: data_streamed: $WORK has $free_mb MB free, the shard needs 400 MB"
  exit 77
fi

# Version-1 shards (llm.c's header, uint16 tokens below the quickstart's vocab of 256): the train
# shard repeats the 256 byte values in 2 MB blocks; the val shard holds 20,000 tokens.
python3 - "$WORK" "$TOKENS" <<'PY'
import struct, sys
d, n = sys.argv[1], int(sys.argv[2])
def shard(path, count, block):
    hdr = [0] * 256; hdr[0] = 20240520; hdr[1] = 1; hdr[2] = count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        whole, rest = divmod(count, len(block) // 2)
        for _ in range(whole): f.write(block)
        f.write(block[: 2 * rest])
pattern = struct.pack("<256H", *range(256))
shard(f"{d}/train_000000.bin", n, pattern * 4096)
shard(f"{d}/val_000000.bin", 20000, struct.pack("<256H", *reversed(range(256))) * 100)
PY
size_mb=$(( $(stat -c %s train_000000.bin) / 1000000 ))
[ "$size_mb" -ge 400 ] || fail "train shard is $size_mb MB, expected 400"

python3 - "$WORK/peak_kb" "$ECO_TRAIN" "$SRC/configs/quickstart.yaml" \
  --set data.source=shards --set "data.train=$WORK/train_*.bin" --set "data.val=$WORK/val_*.bin" \
  --set train.max_steps=5 --set train.log_interval=1 --set train.eval_batches=2 \
  --set train.sample_tokens=16 --set train.threads=1 --set "train.out_dir=$WORK/run" \
  >run.log 2>&1 <<'PY' || { cat run.log; fail "training failed"; }
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(rc)
PY
grep -q "data: shards .*: 1 file, $TOKENS tokens" run.log || fail "the run did not read the shard: $(grep 'data:' run.log)"
[ -f run/ckpt_00000005.bin ] || fail "no step-5 checkpoint: $(tail -3 run.log)"
peak_mb=$(( $(cat peak_kb) / 1024 ))
echo "data_streamed: train shard $size_mb MB, peak RSS $peak_mb MiB (limit $LIMIT_MB)"
[ "$peak_mb" -lt "$LIMIT_MB" ] || fail "peak RSS $peak_mb MiB >= $LIMIT_MB MiB: the shard's tokens were held in memory?"
echo "data_streamed: ok"
