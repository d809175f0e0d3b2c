# A full disk: every write is checked, the flush and close too, and a failed write is
# an error naming the file (exit 1), never a 0-byte summary.json or samples.txt and exit 0. The
# full disk is /dev/full behind a symlink of the file's name (ENOSPC on write, as a full disk),
# which needs no mount and no privileges.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
[ -w /dev/full ] || { echo "skip: no writable /dev/full"; exit 77; }

# full_at NAME FILE: a run whose FILE in its out_dir is on a full disk fails naming FILE.
full_at() {
  local name=$1 file=$2
  mkdir -p "$WORK/$name"
  ln -s /dev/full "$WORK/$name/$file"
  expect_error 1 "$WORK/$name/$file: " -- "$ECO_TRAIN" cfg.yaml --set train.out_dir="$WORK/$name"
}
full_at samples samples.txt
full_at metrics metrics.jsonl
full_at summary summary.json.tmp
full_at config config.resolved.yaml.tmp
full_at checkpoint ckpt_00000008.bin.tmp
[ ! -e summary/summary.json ] || fail "a summary.json was put in place although its write failed"
[ ! -e checkpoint/ckpt_00000008.bin ] || fail "a checkpoint was put in place although its write failed"
echo "disk_full: all cases passed"
