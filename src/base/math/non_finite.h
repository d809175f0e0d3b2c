// Where a host array of weights stops being finite: the scan every weight passes on its way in
// (a Hugging Face import, ParamStore::set, the CPU quantizer) before it is quantized or stored.
// A NaN or an infinity has no code: quantize_value would give it one (NaN -> 0x7F / 0) silently.
#pragma once
#include <cmath>
#include <cstdint>

namespace eco {

struct NonFinite {
  int64_t count = 0;   // non-finite elements
  int64_t first = -1;  // the index of the first of them; -1 when every element is finite
  double value = 0;    // its value (NaN, +inf or -inf)
  explicit operator bool() const { return count > 0; }
};

// The non-finite elements of x[0, n) (T: float or double).
template <class T>
NonFinite find_non_finite(const T* x, int64_t n) {
  NonFinite r;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    if (r.count++ == 0) {
      r.first = i;
      r.value = double(x[i]);
    }
  }
  return r;
}

}  // namespace eco
