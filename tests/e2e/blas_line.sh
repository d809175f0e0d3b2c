# eco-train names its BLAS and core at start-up; a mis-identified core is corrected by one
# re-exec with OPENBLAS_CORETYPE set (walked here by pretending OpenBLAS reported Prescott);
# a user's own OPENBLAS_CORETYPE is left alone.
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
tiny_config >cfg.yaml
line_re='BLAS: OpenBLAS [0-9]+\.[0-9]+\.[0-9]+[^ ]* \((OpenMP|pthreads|sequential)\), core [A-Za-z0-9_]+'

# As shipped: one line, and its core is the one OpenBLAS itself announces when it loads.
env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$ECO_TRAIN" cfg.yaml >plain.log 2>&1 ||
  { cat plain.log; fail "plain run failed"; }
[ "$(grep -cE "$line_re" plain.log)" = 1 ] || fail "expected one BLAS line: $(cat plain.log)"
said=$(grep -oE "$line_re" plain.log | sed 's/.*core //')
loaded=$(grep -oE '^Core: [A-Za-z0-9_]+' plain.log | tail -1 | sed 's/Core: //')
[ "$said" = "$loaded" ] || fail "BLAS line says core $said, OpenBLAS loaded $loaded"
echo "ok: $(grep -oE "BLAS: .*" plain.log)"

# A pretended mis-detection: on a CPU with AVX2+FMA the run re-executes once with the corrected
# core and says so; the run itself still completes.
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  env -u OPENBLAS_CORETYPE ECO_BLAS_PRETEND_CORE=Prescott "$ECO_TRAIN" cfg.yaml \
    --set train.out_dir="$WORK/fixed" >fixed.log 2>&1 || { cat fixed.log; fail "corrected run failed"; }
  [ "$(grep -c 'BLAS: ' fixed.log)" = 1 ] || fail "expected one BLAS line: $(cat fixed.log)"
  grep -qE "$line_re \(corrected from Prescott: OPENBLAS_CORETYPE=(Haswell|Zen|SkylakeX|Cooperlake)\)" fixed.log ||
    fail "no correction in: $(grep 'BLAS' fixed.log)"
  [ -s "$WORK/fixed/summary.json" ] || fail "corrected run wrote no summary"
  echo "ok: $(grep -oE "BLAS: .*" fixed.log)"
fi

# The user's own core type wins, even over a pretended mis-detection.
OPENBLAS_CORETYPE=Haswell ECO_BLAS_PRETEND_CORE=Prescott "$ECO_TRAIN" cfg.yaml \
  --set train.out_dir="$WORK/user" >user.log 2>&1 || { cat user.log; fail "user run failed"; }
grep -qE "$line_re \(OPENBLAS_CORETYPE=Haswell set by the user\)" user.log ||
  fail "user's core type not reported: $(grep 'BLAS' user.log)"
grep -q "corrected" user.log && fail "corrected a user's core type"
echo "ok: $(grep -oE "BLAS: .*" user.log)"
