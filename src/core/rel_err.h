// The norm-wise relative error that the GPU tests, the emulator tests and the benchmarks compare
// results with: ||a - b|| / ||b|| in double (||a - b|| when b is all zeros). A NaN or inf in a
// gives +inf, so that no tolerance passes it; sizes that differ (no reference) give NaN.
#pragma once
#include <cmath>
#include <vector>

namespace eco {

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(den > 0 ? num / den : num);
}

}  // namespace eco
