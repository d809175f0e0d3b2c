// The message of a failed CUDA / cuBLAS call (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include "base/error.h"

namespace eco::cuda {

void fail(const char* file, int line, const char* call, const char* name, const char* what,
          const char* context) {
  const std::string ctx = context && *context ? std::string(" [") + context + "]" : "";
  throw Error(ErrorKind::Internal,
              fmt::format("{}:{}: {} failed: {} ({}){}", file, line, call, name, what, ctx));
}

}  // namespace eco::cuda
