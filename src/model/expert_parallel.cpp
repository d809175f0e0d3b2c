// Expert parallelism's placement: which parameters are routed experts.
#include "model/expert_parallel.h"

#include <cstdlib>

namespace eco {

int routed_expert_of(const std::string& name) {
  static const std::string kTag = "mlp.experts.";
  const size_t at = name.find(kTag);
  if (at == std::string::npos) return -1;
  const char* p = name.c_str() + at + kTag.size();
  char* end = nullptr;
  const long x = std::strtol(p, &end, 10);
  return end != p && *end == '.' ? int(x) : -1;
}

}  // namespace eco
