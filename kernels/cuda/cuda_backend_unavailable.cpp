// make_cuda_backend, cuda_free_memory_bytes, cuda_device_bus_id, have_nccl and make_nccl_communicator in a build
// without the CUDA backend (ECO_CUDA=OFF, or nvcc not found): the CMake build compiles this file
// into the library only then; otherwise kernels/cuda/cuda_backend.cpp defines them.
#include "base/error.h"
#include "dist/device_communicator.h"
#include "base/backend.h"

namespace eco {

uint64_t cuda_free_memory_bytes() { return 0; }
int cuda_device_count() { return 0; }
std::string cuda_device_bus_id() { return {}; }

std::unique_ptr<Backend> make_cuda_backend() {
  usage_error("device: cuda, but this build has no CUDA backend (ECO_CUDA=OFF or nvcc not found)");
}

bool have_nccl() { return false; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator&, Backend&) {
  usage_error("NCCL (device-to-device collectives), but this build has no CUDA backend and no "
              "NCCL (ECO_CUDA=OFF or nvcc not found)");
}

}  // namespace eco
