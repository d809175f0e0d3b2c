// Faults the end-to-end tests inject through the environment (tests/e2e/rank_timeouts.sh); both
// do nothing unless their variable is set.
//   ECO_TEST_STALL_AT=WHERE:RANK   rank RANK stops itself (SIGSTOP) at WHERE: "mpi_init" (before
//                                  MPI_Init) or "agreement" (before the ranks compare configs)
//   ECO_TEST_SLOW_CHECKPOINT_S=S   the writing rank sleeps S seconds before each checkpoint
#pragma once

namespace eco {

// Stops this process when ECO_TEST_STALL_AT names `where` and `rank` (-1: rank unknown, never).
void stall_for_test(const char* where, int rank);
// Sleeps ECO_TEST_SLOW_CHECKPOINT_S seconds (when set).
void slow_checkpoint_for_test();

}  // namespace eco
