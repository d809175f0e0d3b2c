// The MPI communicator (OpenMPI; src/dist/mpi_communicator.cpp): MPI_Init on construction,
// MPI_Finalize on destruction (split's children free their MPI_Comm), errors returned (not fatal)
// and raised with MPI's message.
#pragma once
#include <cstdint>
#include <memory>

#include "dist/communicator.h"

namespace eco {

// Initialises MPI (thread level SERIALIZED: one thread at a time calls it, the main thread or the
// gradient sums' worker, dist/comm_worker.h) and returns the world
// communicator. In a build without MPI: an error saying the binary cannot join an MPI job.
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
// The bytes an MPI communicator's sums hold to receive into (the largest round's so far): at most
// max(ECO_MPI_BUFFER_BYTES, world x 8), agreed as the smallest any rank was given when the
// communicator was made (docs/parallelism.md). 0 for any other communicator.
int64_t mpi_receive_buffer_bytes(const Communicator& c);

}  // namespace eco
