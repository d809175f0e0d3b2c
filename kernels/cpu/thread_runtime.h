// How the CPU backend's OpenMP threads wait at a barrier (the thread count of a run that shares
// the machine, train.threads: auto, is core/cpu_share.h's).
//
// libgomp's own default spins a waiting thread ~300,000 times (milliseconds) before it sleeps.
// On a machine whose cores are busy with other work, a spinning thread burns the time slice the
// thread it waits for needs, and a step slows by two orders of magnitude. eco-train starts with a
// bounded spin instead (GOMP_SPINCOUNT=kDefaultOmpSpinCount), measured to cost nothing on a quiet
// machine (docs/performance.md, "CPU: sharing a busy machine"); OMP_WAIT_POLICY or GOMP_SPINCOUNT
// set by the user is left alone. libgomp reads them while it loads, so the default is applied by
// re-executing the program (blas_runtime.h's ensure_cpu_runtime), before anything else runs.
#pragma once
#include <string>

namespace eco::cpu {

inline constexpr long kDefaultOmpSpinCount = 10000;

// Sets GOMP_SPINCOUNT to the default when the user set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT; true when it set it (the caller must then re-execute for it to take effect).
bool set_default_omp_wait();
// Undoes set_default_omp_wait (its re-exec failed).
void unset_default_omp_wait();

// One line for start-up logs: "spin 10000 then sleep (default)", "OMP_WAIT_POLICY=passive (set by
// the user)".
std::string omp_wait_summary_line();

}  // namespace eco::cpu
