#!/usr/bin/env bash
# What every CUDA kernel asks of the GPU, checked without one: registers, spills, stack and
# static shared memory per architecture, from ptxas (`nvcc --resource-usage`).
#
#   scripts/dev/kernel_resources.sh [ARCHS]        compiles kernels/cuda/*.cu for ARCHS (e.g.
#                                                  "90a;89;80" or 90a,89,80, the default)
#   scripts/dev/kernel_resources.sh --reports DIR  reads the reports the build kept (the CUDA
#                                                  library compiles through
#                                                  scripts/dev/nvcc_keep_ptxas_report.sh: DIR
#                                                  holds NAME.cu.o.ptxas.txt), compiling nothing
#
# Fails (exit 1) when
#   - a __global__ function in kernels/cuda has no __launch_bounds__: with the bound, ptxas keeps
#     registers x threads within the register file for every block size up to it, so no launch
#     can fail with "too many resources requested" (the hosts launch with the bound's constant);
#   - a kernel spills registers or uses a stack frame beyond the ceilings listed below (local
#     memory in a hot kernel is a silent slowdown);
#   - static shared memory exceeds the 48 KiB a block gets without opting in;
#   - (--reports) a kernels/cuda/*.cu has no report, or one older than its source.
# Prints one row per source file and architecture: kernels, the most registers, the most static
# shared memory, the kernels with local memory. A ctest (cuda.kernel_resources) in CUDA builds,
# on the build's own reports.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [[ "${1:-}" == "--reports" ]]; then
  DIR="${2:?kernel_resources: --reports needs the directory of NAME.cu.o.ptxas.txt files}"
  for src in "$ROOT"/kernels/cuda/*.cu; do
    name="$(basename "$src" .cu)"
    report="$DIR/$name.cu.o.ptxas.txt"
    if [[ ! -f "$report" ]]; then
      echo "kernel_resources: no ptxas report $report for kernels/cuda/$name.cu (rebuild the" \
           "CUDA library: it compiles through scripts/dev/nvcc_keep_ptxas_report.sh)" >&2
      exit 2
    fi
    if [[ "$report" -ot "$src" ]]; then
      echo "kernel_resources: $report is older than kernels/cuda/$name.cu (rebuild first)" >&2
      exit 2
    fi
    cp "$report" "$WORK/$name.txt"
  done
else
  ARCHS="${1:-90a;89;80}"
  NVCC="${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}"
  [[ -x "$NVCC" ]] || { echo "kernel_resources: nvcc not found (set NVCC or CUDA_HOME)" >&2; exit 2; }
  GENCODE=""
  IFS=';,' read -ra arch_list <<<"$ARCHS"
  for a in "${arch_list[@]}"; do GENCODE+=" --generate-code=arch=compute_$a,code=sm_$a"; done
  export NVCC ROOT WORK GENCODE

  # One nvcc per source file, largest first (the longest compiles start first); ptxas's report of
  # kernels/cuda/NAME.cu goes to $WORK/NAME.txt.
  ls -S "$ROOT"/kernels/cuda/*.cu | xargs -P "$(nproc)" -I{} bash -c '
    set -f; name="$(basename "$1" .cu)"
    "$NVCC" -DECO_HAVE_CUDA=1 -I"$ROOT" -I"$ROOT/src" -O3 -DNDEBUG -std=c++20 --fmad=false \
      --expt-relaxed-constexpr $GENCODE --resource-usage -x cu -c "$1" -o "$WORK/$name.o" \
      >"$WORK/$name.txt" 2>&1 || { cat "$WORK/$name.txt" >&2; exit 255; }' _ {}
fi

python3 - "$ROOT" "$WORK" <<'EOF'
import collections, glob, os, re, subprocess, sys

root, work = sys.argv[1], sys.argv[2]
# Local memory that is known and accepted: (start of the kernel's demangled name, the most
# stack-frame bytes, the most spilled bytes). None of them is a hot path: the SGDM register and
# per-tensor kernels (and the sign-SGDM test rule's, built on SGDM's) keep an 8-16 byte frame
# with up to 16 bytes of spills (sm_90a: 16 / 16 at bf16 state and 4 elements per thread), two
# one-quad AdamW instances an 8-byte frame; the specialised fp8 / SR / ECO AdamW instances GPT-2
# runs have none.
ACCEPTED = [
    ("void quantized_update_registers_kernel<eco::SgdmRule<float>,", 16, 16),
    ("void tensor_update_pass1_kernel<eco::SgdmRule<float>,", 16, 16),
    # The sign-SGDM rule (the interface's test rule) holds SGDM's rule inside: the same frame.
    ("void quantized_update_registers_kernel<eco::SignSgdmRule<float>,", 16, 16),
    ("void quantized_update_registers_kernel<eco::AdamWRule<float>, float, 1, true, 0, 0, -1,", 8, 0),
    ("void quantized_update_registers_kernel<eco::AdamWRule<float>, unsigned short, 1, false, -1,", 8,
     0),
    # RoPE's angle in double: cos / sin keep a frame for their large-argument reduction, a path
    # never taken (|angle| <= the position).
    ("void rope_kernel<", 40, 0),
]
SMEM_LIMIT = 48 * 1024

errors = []
for path in sorted(glob.glob(os.path.join(root, "kernels/cuda/*.cu")) +
                   glob.glob(os.path.join(root, "kernels/cuda/*.cuh"))):
    text = open(path).read()
    for m in re.finditer(r"__global__\s+void\s+(__launch_bounds__)?", text):
        if not m.group(1):
            line = text.count("\n", 0, m.start()) + 1
            errors.append(f"{os.path.relpath(path, root)}:{line}: __global__ without __launch_bounds__")

entries = []
for txt in sorted(glob.glob(os.path.join(work, "*.txt"))):
    name = os.path.basename(txt)[:-4]
    cur = None
    for line in open(txt):
        m = re.search(r"Compiling entry function '(\S+)' for '(sm_\w+)'", line)
        if m:
            cur = dict(file=name, mangled=m.group(1), arch=m.group(2), stack=0, spill=0, regs=0,
                       smem=0)
            entries.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
        if m:
            cur["stack"], cur["spill"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
            cur = None
if not entries:
    sys.exit("kernel_resources: ptxas reported no kernels")

demangled = subprocess.run(["c++filt"], input="\n".join(e["mangled"] for e in entries),
                           capture_output=True, text=True, check=True).stdout.split("\n")
for e, d in zip(entries, demangled):
    e["name"] = re.sub(r"eco::cuda::(\(anonymous namespace\)::)?", "", d)

def accepted(e):
    return any(e["name"].startswith(prefix) and e["stack"] <= stack and e["spill"] <= spill
               for prefix, stack, spill in ACCEPTED)

for e in entries:
    where = f"{e['file']}.cu [{e['arch']}] {e['name'][:160]}"
    if (e["stack"] or e["spill"]) and not accepted(e):
        errors.append(f"{where}: {e['stack']} bytes stack frame, {e['spill']} bytes spilled")
    if e["smem"] > SMEM_LIMIT:
        errors.append(f"{where}: {e['smem']} bytes of static shared memory (limit {SMEM_LIMIT})")

rows = collections.OrderedDict()
for e in entries:
    r = rows.setdefault((e["file"], e["arch"]), dict(n=0, regs=0, smem=0, local=0))
    r["n"] += 1
    r["regs"] = max(r["regs"], e["regs"])
    r["smem"] = max(r["smem"], e["smem"])
    r["local"] += bool(e["stack"] or e["spill"])
print(f"{'file':<22}{'arch':<8}{'kernels':>8}{'max regs':>10}{'max smem B':>12}{'with local':>12}")
for (f, a), r in sorted(rows.items()):
    print(f"{f:<22}{a:<8}{r['n']:>8}{r['regs']:>10}{r['smem']:>12}{r['local']:>12}")
print(f"{len(entries)} kernel instances; every __global__ has __launch_bounds__"
      if not any("without __launch_bounds__" in x for x in errors) else "")
if errors:
    print("\nkernel_resources: FAILED", file=sys.stderr)
    for x in errors:
        print("  " + x, file=sys.stderr)
    sys.exit(1)
print("kernel_resources: OK")
EOF
