# Every config in configs/ (and configs/paper/, configs/table1/) loads and plans (--plan: validation, parameter table, memory ledger)
# under every treatment, so a change to the config schema cannot leave a shipped config behind.
# The treatments come from eco-train's own error message for an unknown one.
source "$(dirname "$0")/lib/common.bash"
cd "$SRC"
msg=$("$ECO_TRAIN" configs/quickstart.yaml --plan --set precision.treatment=none 2>&1 >/dev/null) &&
  fail "an unknown treatment was accepted"
treatments=$(sed -n 's/.*expected one of: \(.*\))$/\1/p' <<<"$msg" | tr -d ',')
[ "$(wc -w <<<"$treatments")" -ge 14 ] || fail "treatments not listed: $msg"
configs=(configs/*.yaml configs/table1/*.yaml)
[ "${#configs[@]}" -ge 8 ] || fail "only ${#configs[@]} configs in configs/"
plans=0
for config in "${configs[@]}"; do
  for t in $treatments; do
    # A plan that does not fit this machine (the paper-size configs on a small CPU host) is still
    # a plan: exit 2 with "does not fit" after the whole ledger; anything else is a failure.
    rc=0
    out=$("$ECO_TRAIN" "$config" --plan --set precision.treatment="$t" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
      [ "$rc" -eq 2 ] && grep -q "does not fit" <<<"$out" || fail "$config under $t: $out"
    fi
    grep -q "^static bytes per quantized parameter" <<<"$out" ||
      fail "$config under $t: no memory ledger in: $out"
    plans=$((plans + 1))
  done
done
echo "shipped configs ok: ${#configs[@]} configs x $(wc -w <<<"$treatments") treatments = $plans plans"
# The paper's sizes (configs/paper/): every one plans under a treatment of each kind,
# and says how many tokens per parameter outside the embeddings it trains (100, the paper's).
paper=(configs/paper/*.yaml)
[ "${#paper[@]}" -eq 6 ] || fail "expected the paper's 6 dense sizes in configs/paper, found ${#paper[@]}"
for config in "${paper[@]}"; do
  for t in fp32 bf16-mw fp8-eco-sr int4-eco-sr; do
    out=$("$ECO_TRAIN" "$config" --plan --set precision.treatment="$t" 2>&1) || fail "$config under $t: $out"
    grep -q "^training: .* (.* per parameter, 100.0 per parameter outside the embeddings" <<<"$out" ||
      fail "$config under $t: not 100 tokens per parameter: $(grep '^training' <<<"$out")"
  done
done
echo "paper configs ok: ${#paper[@]} sizes x 4 treatments"
