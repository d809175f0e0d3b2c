#!/usr/bin/env bash
# eco-train under AddressSanitizer + UndefinedBehaviorSanitizer against the end-to-end bad-input
# tests: builds eco-train alone (CPU only, -O1 -g -fsanitize=address,undefined) into
# build-asan/, then runs tests/e2e/{bad_input,bad_config,bad_import,run_dir,resume_cases,
# divergence,disk_full}.sh against it, stopping at the first sanitizer report. Not part of scripts/test.sh
# (it takes a build of its own): CI (.ci/run) runs it after scripts/test.sh.
# Usage: scripts/dev/sanitize_check.sh [TEST...]   (test names without .sh; default: those above)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-asan
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECO_CUDA=OFF -DECO_BUILD_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  >"$build/cmake.log" 2>&1 || { cat "$build/cmake.log"; exit 1; }
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target eco-train
# halt_on_error: the first report fails the test; leaks are not errors here (a refused run
# exits through an exception, which is fine to leave to the OS).
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=0:exitcode=86
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=86
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(bad_input bad_config bad_import run_dir resume_cases divergence disk_full)
failed=0
for t in "${tests[@]}"; do
  log="$build/$t.log"
  if bash "tests/e2e/$t.sh" "$PWD/$build/eco-train" "$PWD" >"$log" 2>&1; then
    rc=0
  else
    rc=$?
  fi
  if grep -qE "ERROR: AddressSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer" "$log"; then
    echo "sanitize_check: $t: sanitizer report (see $log):"
    grep -m1 -A12 -E "ERROR: AddressSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer" "$log"
    failed=1
  elif [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    echo "sanitize_check: $t: failed (exit $rc; see $log):"
    tail -3 "$log"
    failed=1
  else
    echo "sanitize_check: $t: ok"
  fi
done
exit $failed
