// Expert parallelism's placement: which parameters are routed experts.
#include "model/expert_parallel.h"

#include <cstdlib>

#include "base/error.h"

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

std::string with_routed_expert(const std::string& name, int y) {
  const int x = routed_expert_of(name);
  ECO_ASSERT(x >= 0, "'{}' is not a routed expert's parameter", name);
  const std::string from = fmt::format("mlp.experts.{}.", x);
  const size_t at = name.find(from);
  return name.substr(0, at) + fmt::format("mlp.experts.{}.", y) + name.substr(at + from.size());
}

}  // namespace eco
