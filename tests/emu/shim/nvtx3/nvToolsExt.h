// Host emulation (tests/emu) of the NVTX ranges the CUDA backend opens: no-ops that keep the
// nesting depth, so that a test can check every push was popped (emu::nvtx_depth back to 0).
#pragma once
namespace emu {
inline int nvtx_depth = 0;
inline long nvtx_pushes = 0;
}  // namespace emu
inline int nvtxRangePushA(const char*) {
  ++emu::nvtx_pushes;
  return emu::nvtx_depth++;
}
inline int nvtxRangePop() { return --emu::nvtx_depth; }
