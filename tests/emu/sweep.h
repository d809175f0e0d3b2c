// How much of a sweep the emulator tests run: every case it lists with ECO_EMU_FULL=1 (the ctest
// label `exhaustive`, which scripts/test.sh runs too; tests/emu/README.md), else its representative
// cases, so that CI on two cores stays within its time.
#pragma once
#include <cstdlib>
#include <cstring>

namespace emuh {

inline bool full_sweep() {
  const char* v = std::getenv("ECO_EMU_FULL");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace emuh
