# Every config in configs/ loads and plans (--plan: validation, parameter table, memory ledger)
# under every treatment, so a change to the config schema cannot leave a shipped config behind.
# The treatments come from eco-train's own error message for an unknown one.
source "$(dirname "$0")/lib/common.bash"
cd "$SRC"
msg=$("$ECO_TRAIN" configs/quickstart.yaml --plan --set precision.treatment=none 2>&1 >/dev/null) &&
  fail "an unknown treatment was accepted"
treatments=$(sed -n 's/.*expected one of: \(.*\))$/\1/p' <<<"$msg" | tr -d ',')
[ "$(wc -w <<<"$treatments")" -ge 14 ] || fail "treatments not listed: $msg"
configs=(configs/*.yaml)
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
