#!/usr/bin/env bash
# Speed of a CPU run on a busy machine: eco-bench's median ms/step on CONFIG (default
# configs/quickstart.yaml) quiet and beside BUSY busy loops (default 2, one shell loop each),
# for each variant, alternated over ROUNDS rounds so that a change in the machine's load hits all
# alike. Prints per variant the median quiet and busy ms/step, busy / its own quiet and busy / the
# shipped default's quiet.
#   scripts/dev/fair_bench.sh [--rounds N] [--busy N] [--steps N] [--config C] [VARIANT...]
# A VARIANT is LABEL=THREADS[,ENV=VALUE...]: THREADS is train.threads (0, N or auto), the ENV
# settings go to eco-bench's environment (e.g. GOMP_SPINCOUNT=300000 for libgomp's own default,
# OMP_WAIT_POLICY=passive). Default variants: the shipped default (threads 0, eco-train's bounded
# spin), threads auto, and libgomp's own spin (threads 0, GOMP_SPINCOUNT=300000).
# The user's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are removed, as for every shipped figure.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 busy=2 steps=40 config=configs/quickstart.yaml
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    -*) echo "usage: scripts/dev/fair_bench.sh [--rounds N] [--busy N] [--steps N] [--config C] [LABEL=THREADS[,ENV=VALUE...]...]" >&2; exit 2 ;;
    *) variants+=("$1"); shift ;;
  esac
done
[ ${#variants[@]} -gt 0 ] || variants=("shipped=0" "auto=auto" "libgomp-spin=0,GOMP_SPINCOUNT=300000")
[ -x build/eco-bench ] || { echo "fair_bench.sh: build/eco-bench not found: run scripts/build.sh" >&2; exit 2; }

loops=()
stop_loops() { [ ${#loops[@]} -eq 0 ] || { kill "${loops[@]}" 2>/dev/null; wait "${loops[@]}" 2>/dev/null || true; }; loops=(); }
trap stop_loops EXIT
start_loops() { for _ in $(seq 1 "$busy"); do (while :; do :; done) & loops+=($!); done; sleep 0.3; }

run() {  # VARIANT -> median ms/step
  local spec=${1#*=} threads envs=() out
  threads=${spec%%,*}
  [[ $spec == *,* ]] && IFS=, read -ra envs <<<"${spec#*,}"
  out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_NUM_THREADS -u OMP_WAIT_POLICY \
    -u GOMP_SPINCOUNT "${envs[@]}" timeout 600 build/eco-bench "$config" --steps "$steps" \
    --warmup 3 --set train.threads="$threads" 2>&1) ||
    { echo "$out" >&2; echo "fair_bench.sh: eco-bench failed ($1)" >&2; exit 1; }
  awk '/^median ms\/step/{print $3}' <<<"$out"
}

declare -A quiet busy_ms
echo "fair_bench: $config, $steps steps, $busy busy loop(s), $rounds round(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    q=$(run "$v")
    start_loops; b=$(run "$v"); stop_loops
    quiet[$v]+="$q " busy_ms[$v]+="$b "
    echo "round $r: ${v%%=*}: quiet $q ms/step, busy $b ms/step"
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(median "${quiet[${variants[0]}]}")
echo
printf '%-16s %-34s %10s %10s %12s %14s\n' variant setting "quiet ms" "busy ms" "busy/quiet" "busy/${variants[0]%%=*}"
for v in "${variants[@]}"; do
  q=$(median "${quiet[$v]}") b=$(median "${busy_ms[$v]}")
  printf '%-16s %-34s %10s %10s %12.2f %14.2f\n' "${v%%=*}" "threads ${v#*=}" "$q" "$b" \
    "$(awk -v b="$b" -v q="$q" 'BEGIN{print b/q}')" "$(awk -v b="$b" -v q="$base" 'BEGIN{print b/q}')"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
