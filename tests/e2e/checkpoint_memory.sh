# A checkpoint of a ZeRO-1 run does not cost the other ranks a whole copy of the sharded state:
# 2 ranks train a 19M-parameter GPT-2 for 2 steps and write the final checkpoint, at zero 0 and at
# zero 1, and rank 1's peak resident memory (GNU time's %M) must be lower at zero 1 by at least
# 16 MB (it holds half the moments, 76 MB fewer; a capture that gave every rank a whole-size
# buffer of each sharded section made zero 1 ~60 MB higher than zero 0 instead).
# Skips (77) without mpirun, GNU time or in a build without MPI.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
mpi_setup
[ -x /usr/bin/time ] || { echo "SKIP: checkpoint_memory: no /usr/bin/time (apt-get install time)"; exit 77; }
tiny_config >cfg.yaml
common=(--set model.d_model=512 --set model.n_layer=6 --set model.n_head=8 --set model.vocab_size=256
  --set model.seq_len=64 --set train.max_steps=2 --set train.batch_size=2 --set train.eval_interval=0
  --set train.sample_tokens=0 --set train.threads=1 --set parallel.dp=2)

peak_kb() {  # ZERO -> rank 1's peak RSS in KB (each rank's through GNU time into rss.ZERO.RANK)
  local z=$1
  "${MPI[@]}" -np 2 bash -c '/usr/bin/time -f %M -o "rss.$0.$OMPI_COMM_WORLD_RANK" "$@"' "$z" \
    "$ECO_TRAIN" cfg.yaml "${common[@]}" --set parallel.zero="$z" \
    --set train.out_dir="$WORK/z$z" >"z$z.log" 2>&1 || { cat "z$z.log"; fail "zero $z: exit $?"; }
  [ -f "$WORK/z$z/ckpt_00000002.bin" ] || fail "zero $z wrote no final checkpoint"
  grep -q "built without MPI" "z$z.log" && { echo "SKIP: eco-train built without MPI"; exit 77; }
  echo "zero $z: peak RSS rank 0 $(cat "rss.$z.0") KB, rank 1 $(cat "rss.$z.1") KB" >&2
  cat "rss.$z.1"
}
z0=$(peak_kb 0)
z1=$(peak_kb 1)
[ $((z1 + 16384)) -lt "$z0" ] ||
  fail "rank 1 peaks at $z1 KB at zero 1 against $z0 KB at zero 0 (expected at least 16 MB lower)"
echo "ok: rank 1's peak at zero 1 is $(((z0 - z1) / 1024)) MB below zero 0's ($z1 against $z0 KB)"
