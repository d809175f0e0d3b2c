// Rotary position embedding on the q and k heads of a fused qkv buffer (HF "rotate_half"
// pairing; grouped-query rows too). Angles are computed in double so float and double runs rotate by the same amount.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {

void check_rope_shape(int NH, int KVH, int hs) {
  if (NH <= 0 || KVH <= 0 || hs <= 0 || hs % 2 != 0)
    throw std::invalid_argument("rope: need NH, KVH > 0 and an even head size");
}

// Rotates the q heads (NH, from 0) and k heads (KVH, from NH hs) of one qkv row for position t:
// in every head, (x_i, x_{i+half}) -> (x_i cos - x_{i+half} sin, x_{i+half} cos + x_i sin).
// sign = -1 gives the transpose (inverse) rotation. The rotated src is added to dst
// (kAccumulate) or stored in it.
template <class T, bool kAccumulate>
void rotate_row(T* dst, const T* src, int t, int NH, int KVH, int hs, double theta, double sign) {
  const int half = hs / 2;
  for (int i = 0; i < half; i++) {
    const double angle = t * std::pow(theta, -2.0 * i / hs);
    const T cs = T(std::cos(angle)), sn = T(sign * std::sin(angle));
    for (int h = 0; h < NH + KVH; h++) {  // q heads, then k heads: contiguous
      const int64_t a = int64_t(h) * hs + i, b = a + half;
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

}  // namespace

template <class T>
void rope_forward_gqa(T* out, const T* inp, int B, int Tn, int NH, int KVH, int hs, float theta) {
  check_rope_shape(NH, KVH, hs);
  const int64_t ld = int64_t(NH + 2 * KVH) * hs, v0 = int64_t(NH + KVH) * hs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * Tn; n++) {
    const T* x = inp + int64_t(n) * ld;
    T* o = out + int64_t(n) * ld;
    rotate_row<T, false>(o, x, n % Tn, NH, KVH, hs, theta, 1.0);
    std::copy(x + v0, x + ld, o + v0);  // v passes through
  }
}

template <class T>
void rope_backward_gqa(T* dinp, const T* dout, int B, int Tn, int NH, int KVH, int hs,
                       float theta) {
  check_rope_shape(NH, KVH, hs);
  const int64_t ld = int64_t(NH + 2 * KVH) * hs, v0 = int64_t(NH + KVH) * hs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * Tn; n++) {
    const T* d = dout + int64_t(n) * ld;
    T* dx = dinp + int64_t(n) * ld;
    rotate_row<T, true>(dx, d, n % Tn, NH, KVH, hs, theta, -1.0);  // R^T: rotation by -angle
    for (int64_t c = v0; c < ld; c++) dx[c] += d[c];
  }
}

template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, float theta) {
  if (NH <= 0 || C % NH != 0) throw std::invalid_argument("rope: C must split into NH heads");
  rope_forward_gqa(out, inp, B, Tn, NH, NH, C / NH, theta);
}

template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, float theta) {
  if (NH <= 0 || C % NH != 0) throw std::invalid_argument("rope: C must split into NH heads");
  rope_backward_gqa(dinp, dout, B, Tn, NH, NH, C / NH, theta);
}

template void rope_forward<float>(float*, const float*, int, int, int, int, float);
template void rope_forward<double>(double*, const double*, int, int, int, int, float);
template void rope_backward<float>(float*, const float*, int, int, int, int, float);
template void rope_backward<double>(double*, const double*, int, int, int, int, float);
template void rope_forward_gqa<float>(float*, const float*, int, int, int, int, int, float);
template void rope_forward_gqa<double>(double*, const double*, int, int, int, int, int, float);
template void rope_backward_gqa<float>(float*, const float*, int, int, int, int, int, float);
template void rope_backward_gqa<double>(double*, const double*, int, int, int, int, int, float);

}  // namespace eco::cpu
