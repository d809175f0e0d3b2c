#!/usr/bin/env bash
# Static SASS instruction counts of the fused quantized update (kernels/cuda/optimizer_update.cu)
# and of its per-element components (Philox, the E4M3 codec, the scale division), without a GPU.
#
#   scripts/dev/sass_count.sh [SOURCE_ROOT]      (default: this checkout; ARCH=sm_90a by default)
#
# Compiles SOURCE_ROOT's optimizer_update.cu (the project's nvcc flags) and a probe file of
# one-element kernels to cubins, disassembles them with cuobjdump and prints:
#   - the register kernel for fp8-eco-sr AdamW with fp32 state (quantized_update_registers_kernel
#     <AdamWRule, float, kQuads, kVec = true, E4M3, SR, Eco>) at 4, 8 and 16 elements per
#     thread: all instructions; "main", those outside the called slow-path subroutines (the IEEE
#     division's and sqrt's); "fast", main less the set-up of those calls, i.e. the path of an
#     element whose divisions take their fast path (the closest static figure to Nsight's
#     executed instructions); per element, and as the slope between 4 and 16 elements per
#     thread (what each further element costs: the per-thread set-up, reduction and scale
#     excluded);
#   - each component as its probe kernel's count minus the count of a probe that does only the
#     same loads and stores.
# Static counts: every branch's code counts once whatever runs (the slope counts both sides of
# the codec's per-element branches), so they track but do not equal Nsight Compute's executed
# instructions per element. Pass another tree (e.g. `git archive HEAD | tar -x -C /tmp/base`) to
# compare before and after. cuobjdump and nvdisasm come from the CUDA toolkit or from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm), installed here when missing.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
SRC="$(cd "${1:-$HERE}" && pwd)"
ARCH="${ARCH:-sm_90a}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

find_tool() {  # $1: cuobjdump or nvdisasm
  local t
  for t in "${CUDA_HOME:-/usr/local/cuda}/bin/$1" "$(command -v "$1" || true)"; do
    [[ -n "$t" && -x "$t" ]] && { dirname "$t"; return; }
  done
  python3 - "$1" <<'EOF'
import glob, os, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(d, "nvidia", "cu*", "bin", sys.argv[1])):
        print(os.path.dirname(p)); sys.exit(0)
EOF
}
for tool in cuobjdump nvdisasm; do
  if [[ -z "$(find_tool $tool)" ]]; then
    echo "installing $tool (pip: nvidia-cuda-$tool)" >&2
    pip install -q "nvidia-cuda-$tool" >&2
  fi
  PATH="$(find_tool $tool):$PATH"
done
export PATH

NVCC_FLAGS=(-O3 -DNDEBUG -std=c++20 --fmad=false --expt-relaxed-constexpr -arch="$ARCH" -cubin
            -I"$SRC" -I"$SRC/src")

# One element (one Philox call) per thread; the _io probes do the same loads and stores only.
cat >"$WORK/probes.cu" <<'EOF'
#include <cstdint>
#include "base/math/philox.h"
#include "base/math/qformat.h"
using namespace eco;
#define ID (blockIdx.x * blockDim.x + threadIdx.x)
extern "C" __global__ void io(const float* x, const uint32_t* r, uint32_t* out, float s) {
  out[ID] = qcodec::f32_bits(x[ID]) ^ r[ID];
}
extern "C" __global__ void io4(const uint4* c, uint4* out, uint32_t k0, uint32_t k1) {
  out[ID] = c[ID];
}
extern "C" __global__ void philox4x32_10_call(const uint4* c, uint4* out, uint32_t k0, uint32_t k1) {
  const uint4 t = c[ID];
  const Philox4x32 p = philox4x32_10(Philox4x32{{t.x, t.y, t.z, t.w}}, k0, k1);
  out[ID] = make_uint4(p.v[0], p.v[1], p.v[2], p.v[3]);
}
#ifdef ECO_PROBE_PHILOX_KEY  // trees with a precomputed key schedule (src/base/math/philox.h)
extern "C" __global__ void io4_key(const uint4* c, uint4* out, PhiloxKey key) { out[ID] = c[ID]; }
extern "C" __global__ void philox4x32_10_call_scheduled_key(const uint4* c, uint4* out, PhiloxKey key) {
  const uint4 t = c[ID];
  const Philox4x32 p = philox4x32_10(Philox4x32{{t.x, t.y, t.z, t.w}}, key);
  out[ID] = make_uint4(p.v[0], p.v[1], p.v[2], p.v[3]);
}
#endif
extern "C" __global__ void e4m3_encode_sr(const float* x, const uint32_t* r, uint32_t* out, float s) {
  out[ID] = fp8_e4m3_encode_sr(x[ID], r[ID]);
}
extern "C" __global__ void e4m3_encode_rtn(const float* x, const uint32_t* r, uint32_t* out, float s) {
  out[ID] = fp8_e4m3_encode_rtn(x[ID]) ^ r[ID];
}
extern "C" __global__ void e4m3_decode(const float* x, const uint32_t* r, uint32_t* out, float s) {
  out[ID] = qcodec::f32_bits(fp8_e4m3_decode(uint8_t(r[ID]))) ^ qcodec::f32_bits(x[ID]);
}
extern "C" __global__ void scale_division(const float* x, const uint32_t* r, uint32_t* out, float s) {
  out[ID] = qcodec::f32_bits(x[ID] / s) ^ r[ID];
}
extern "C" __global__ void quantize_value_e4m3_sr(const float* x, const uint32_t* r, uint32_t* out,
                                                  float s) {
  out[ID] = quantize_value(QFormat::E4M3, Rounding::SR, x[ID], s, r[ID]);
}
extern "C" __global__ void dequantize_value_e4m3(const float* x, const uint32_t* r, uint32_t* out,
                                                 float s) {
  out[ID] = qcodec::f32_bits(dequantize_value(QFormat::E4M3, uint8_t(r[ID]), s)) ^ qcodec::f32_bits(x[ID]);
}
EOF

echo "compiling $SRC/kernels/cuda/optimizer_update.cu for $ARCH (about a minute)" >&2
nvcc "${NVCC_FLAGS[@]}" -o "$WORK/update.cubin" "$SRC/kernels/cuda/optimizer_update.cu"
PROBE_FLAGS=()
grep -q "struct PhiloxKey" "$SRC/src/base/math/philox.h" && PROBE_FLAGS+=(-DECO_PROBE_PHILOX_KEY)
nvcc "${NVCC_FLAGS[@]}" "${PROBE_FLAGS[@]}" -o "$WORK/probes.cubin" "$WORK/probes.cu"
cuobjdump -sass "$WORK/update.cubin" >"$WORK/update.sass"
cuobjdump -sass "$WORK/probes.cubin" >"$WORK/probes.sass"

python3 - "$WORK/update.sass" "$WORK/probes.sass" "$SRC" "$ARCH" <<'EOF'
import re, subprocess, sys

def functions(path):
    """{demangled name: [(address, opcode text)]}, NOPs dropped."""
    out, cur = {}, None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = subprocess.run(["c++filt"], input=m.group(1), capture_output=True,
                                 text=True).stdout.strip()
            out[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if cur is not None and m and not re.match(r"(@!?U?P\w+\s+)?NOP\b", m.group(2)):
            out[cur].append((int(m.group(1), 16), m.group(2)))
    return out

def counts(code):
    """(all instructions, "main": those outside the CALL.REL targets' subroutines (the IEEE
    division's and sqrt's slow paths), "fast": main less each call's setup, i.e. the
    instructions between the conditional branch that skips a slow-path call and the call (plus
    the branch back after it)), the final BRA-to-self not counted. "fast" is the straight-line
    path an element takes when no division or sqrt needs its slow path: the closest static
    figure to the executed instructions (predicated instructions count: they issue)."""
    targets = {int(m.group(1), 16) for _, t in code
               for m in [re.search(r"CALL\.REL\.NOINC\s+(0x[0-9a-f]+)", t)] if m}
    inside, sub = 0, False
    for addr, text in code:
        if addr in targets:
            sub = True
        if sub:
            inside += 1
            if re.match(r"(@!?U?P\w+\s+)?RET\b", text) and not text.startswith("@"):
                sub = False
    setup, sub = 0, False
    for k, (addr, text) in enumerate(code):
        if addr in targets:
            sub = True
        if sub or not text.startswith("CALL.REL.NOINC"):
            continue
        j = k - 1
        while j >= 0 and not re.match(r"@!?P\w+\s+BRA\b", code[j][1]):
            j -= 1
        setup += k - j + (1 if k + 1 < len(code) and re.match(r"BRA\b", code[k + 1][1]) else 0)
    n = len(code) - (1 if code and re.match(r"BRA\b", code[-1][1]) else 0)
    return n, n - inside, n - inside - setup

update, probes = functions(sys.argv[1]), functions(sys.argv[2])
print(f"# static SASS instructions, {sys.argv[4]}, sources {sys.argv[3]}")
print("## fp8-eco-sr AdamW, fp32 state: quantized_update_registers_kernel<AdamWRule, float, Q, true, E4M3, SR, Eco>")
print(f"{'elements/thread':>16} {'all':>7} {'main':>7} {'fast':>7} {'all/elem':>9} {'main/elem':>10} {'fast/elem':>10}")
def kernel_table(suffix):
    """The table for the instantiations whose template arguments end in `suffix` (None if absent)."""
    rows = {}
    for quads in (1, 2, 4):
        pattern = f"quantized_update_registers_kernel<eco::AdamWRule, float, {quads}, true, 0, 1, 2{suffix}>"
        name = [k for k in update if pattern in k]
        if len(name) != 1:
            return None
        rows[quads] = counts(update[name[0]])
    out = []
    for quads, r in rows.items():
        e = 4 * quads
        out.append(f"{e:>16} {r[0]:>7} {r[1]:>7} {r[2]:>7} {r[0] / e:>9.1f} {r[1] / e:>10.1f} {r[2] / e:>10.1f}")
    slope = [(rows[4][i] - rows[1][i]) / 12 for i in range(3)]
    out.append(f"{'slope 4->16':>16} {'':>7} {'':>7} {'':>7} {slope[0]:>9.1f} {slope[1]:>10.1f} "
               f"{slope[2]:>10.1f}   <- per further element")
    return "\n".join(out)

# Trees before the bias-correction specialization have no last template argument.
general = kernel_table(", false") or kernel_table("")
if general is None:
    sys.exit("the fp8-eco-sr AdamW register kernels were not found")
print(general)
unbiased = kernel_table(", true")
if unbiased:
    print("## the same at bias corrections 1 (AdamWRule::unbiased(): most steps of a run)")
    print(unbiased)
print("## components (probe kernel minus its loads/stores; per call)")
base = {k: counts(probes[k]) for k in ("io", "io4", "io4_key") if k in probes}
for name, io in [("philox4x32_10_call", "io4"), ("philox4x32_10_call_scheduled_key", "io4_key"),
                 ("e4m3_encode_sr", "io"), ("e4m3_encode_rtn", "io"), ("e4m3_decode", "io"),
                 ("scale_division", "io"), ("quantize_value_e4m3_sr", "io"),
                 ("dequantize_value_e4m3", "io")]:
    if name not in probes:
        continue
    n, main, fast = counts(probes[name])
    print(f"{name:>34}: {n - base[io][0]:>4} all, {main - base[io][1]:>4} main, {fast - base[io][2]:>4} fast")
EOF
