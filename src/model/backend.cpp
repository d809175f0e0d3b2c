// Backend selection by the config's `device`.
#include "model/backend.h"

#include "core/error.h"

namespace eco {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend(DType::F32);
  if (device == "cuda") return make_cuda_backend();
  usage_error("device '{}' is unknown (expected cpu or cuda)", device);
}

}  // namespace eco
