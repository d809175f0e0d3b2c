// Backend selection by the config's `device`. Its own translation unit: it refers to
// make_cuda_backend, which only executables that link the CUDA backend (or the refusing stub of
// CPU builds, kernels/cuda/cuda_backend_unavailable.cpp) provide, while backend.cpp's default
// operations are needed by every backend.
#include "base/error.h"
#include "base/backend.h"

namespace eco {

std::unique_ptr<Backend> make_backend(Device device) {
  switch (device) {
    case Device::Cpu: return make_cpu_backend(DType::F32);
    case Device::Cuda: return make_cuda_backend();
  }
  usage_error("device {} is unknown (expected cpu or cuda)", int(device));
}

}  // namespace eco
