#!/usr/bin/env bash
# Trains every treatment (or the ones named) on the same config, data and seed, one after the
# other, then writes results/<config name>/: summary.csv, summary.md and plots.
#   scripts/treatments.sh configs/shakespeare-llama-cpu.yaml [TREATMENT...] [-- --set k=v ...]
# Resumable: a finished treatment (summary.json present) is skipped, an interrupted one resumes
# from its latest checkpoint. Runs live in runs/<config name>/<treatment>/. ECO_LAUNCH, when set,
# prefixes every eco-train command (e.g. "mpirun -np 4 --oversubscribe"), and ECO_RUNS_NAME
# replaces the config name in runs/ and results/; ECO_PAPER_SIZE (30m, 100m, 800m) sets the
# paper's Table 1 numbers beside the results.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/treatments.sh CONFIG.yaml [TREATMENT...] [-- --set k=v ...]" >&2; exit 2; }
config=$1
shift
[ -f "$config" ] || { echo "treatments.sh: $config: no such config file" >&2; exit 2; }
name=${ECO_RUNS_NAME:-$(basename "$config" .yaml)}
read -r -a launch <<<"${ECO_LAUNCH:-}"
treatments=()
extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  treatments+=("$1")
  shift
done
if [ ${#treatments[@]} -eq 0 ]; then
  treatments=(bf16-mw fp8-mw-rtn fp8-mw-sr fp8-naive-rtn fp8-naive-sr fp8-eco-rtn fp8-eco-sr
    int4-mw-rtn int4-mw-sr int4-naive-rtn int4-naive-sr int4-eco-rtn int4-eco-sr)
fi
[ -x build/eco-train ] || scripts/build.sh >/dev/null
runs=runs/$name
results=results/$name
mkdir -p "$runs"
# Treatments finished by an earlier checkout (summaries committed under results/) are not rerun,
# and stay in the summary even when this call names only some treatments.
for f in "$results"/*.summary.json; do
  [ -e "$f" ] || continue
  t=$(basename "$f" .summary.json)
  if [ ! -f "$runs/$t/summary.json" ] && [ -f "$results/$t.metrics.jsonl" ]; then
    mkdir -p "$runs/$t"
    cp "$results/$t.summary.json" "$runs/$t/summary.json"
    cp "$results/$t.metrics.jsonl" "$runs/$t/metrics.jsonl"
  fi
done
i=0
for t in "${treatments[@]}"; do
  i=$((i + 1))
  out=$runs/$t
  if [ -f "$out/summary.json" ] && grep -q '"steps"' "$out/summary.json" && ! ls "$out"/*.tmp >/dev/null 2>&1; then
    echo "[$i/${#treatments[@]}] $t: done already ($out/summary.json)"
    continue
  fi
  resume=()
  if ls "$out"/ckpt_*.bin >/dev/null 2>&1; then resume=(--resume); fi
  echo "[$i/${#treatments[@]}] $t -> $out ${resume[*]}"
  ${launch[@]+"${launch[@]}"} build/eco-train "$config" --set precision.treatment="$t" --set train.out_dir="$out" \
    "${extra[@]}" "${resume[@]}" >"$runs/$t.log" 2>&1
  rc=$?
  tail -n 2 "$runs/$t.log" | sed 's/^/    /'
  if [ $rc -ne 0 ] && [ ! -f "$out/summary.json" ]; then
    echo "    $t failed (exit $rc, see $runs/$t.log)"
  fi
done
python3 scripts/summarize_treatments.py "$runs" --out "$results" \
  ${ECO_PAPER_SIZE:+--paper "$ECO_PAPER_SIZE"}
