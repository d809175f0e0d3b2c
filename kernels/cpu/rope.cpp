// Rotary position embedding on the q and k parts of a fused qkv buffer (HF "rotate_half"
// pairing). Angles are computed in double so float and double runs rotate by the same amount.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {

void check_rope_shape(int C, int NH) {
  if (NH <= 0 || C % NH != 0 || (C / NH) % 2 != 0)
    throw std::invalid_argument("rope: C must split into NH heads of even size");
}

// Rotates the q and k parts of one qkv row (3C) for position t: in every head,
// (x_i, x_{i+half}) -> (x_i cos - x_{i+half} sin, x_{i+half} cos + x_i sin). sign = -1 gives the
// transpose (inverse) rotation. The rotated src is added to dst (kAccumulate) or stored in it.
template <class T, bool kAccumulate>
void rotate_row(T* dst, const T* src, int t, int C, int NH, double theta, double sign) {
  const int hs = C / NH, half = hs / 2;
  for (int i = 0; i < half; i++) {
    const double angle = t * std::pow(theta, -2.0 * i / hs);
    const T cs = T(std::cos(angle)), sn = T(sign * std::sin(angle));
    for (int part = 0; part < 2; part++) {  // q, then k
      for (int h = 0; h < NH; h++) {
        const int64_t a = int64_t(part) * C + int64_t(h) * hs + i, b = a + half;
        const T ra = src[a] * cs - src[b] * sn;
        const T rb = src[b] * cs + src[a] * sn;
        if constexpr (kAccumulate) {
          dst[a] += ra;
          dst[b] += rb;
        } else {
          dst[a] = ra;
          dst[b] = rb;
        }
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, float theta) {
  check_rope_shape(C, NH);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * Tn; n++) {
    const T* x = inp + int64_t(n) * 3 * C;
    T* o = out + int64_t(n) * 3 * C;
    rotate_row<T, false>(o, x, n % Tn, C, NH, theta, 1.0);
    std::copy(x + 2 * C, x + 3 * C, o + 2 * C);  // v passes through
  }
}

template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, float theta) {
  check_rope_shape(C, NH);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * Tn; n++) {
    const T* d = dout + int64_t(n) * 3 * C;
    T* dx = dinp + int64_t(n) * 3 * C;
    rotate_row<T, true>(dx, d, n % Tn, C, NH, theta, -1.0);  // R^T is the rotation by -angle
    for (int c = 2 * C; c < 3 * C; c++) dx[c] += d[c];
  }
}

template void rope_forward<float>(float*, const float*, int, int, int, int, float);
template void rope_forward<double>(double*, const double*, int, int, int, int, float);
template void rope_backward<float>(float*, const float*, int, int, int, int, float);
template void rope_backward<double>(double*, const double*, int, int, int, int, float);

}  // namespace eco::cpu
