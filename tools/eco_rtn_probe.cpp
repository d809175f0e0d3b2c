// eco-rtn-probe: how each update policy's error depends on the learning rate, on a noisy
// quadratic with E4M3 per-row weights: f(W) = 0.5 ||W - W*||^2, gradient (W - W*) + 0.01 noise,
// AdamW(0.9, 0.98) at a constant lr for 4000 steps; prints the MSE to W* over the last 500 steps
// for master weights (RTN), naive SR, ECO RTN and ECO SR, using the shared group update.
// Written to investigate why ECO-RTN's gap grows as the lr decays in the shakespeare runs; also
// runs ECO-RTN with row scales that may not shrink (eco-rtn-sticky) and naive RTN.
#include <cstdio>
#include <vector>
#include <cmath>
#include "core/rng.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/scale_groups.h"
using namespace eco;
// FormatQuantizer whose scale never shrinks within a row (frozen unless absmax grows): isolates the
// effect of re-deriving the row scale every step.
struct StickyScale : FormatQuantizer {
  float floor_scale = 0;
  float scale_for(float absmax) const { return fmaxf(floor_scale, FormatQuantizer::scale_for(absmax)); }
};
int main() {
  const int rows = 16, cols = 256, n = rows * cols, T = 4000;
  for (double lr : {1e-3, 3e-4, 1e-4, 3e-5}) {
    printf("lr %.0e:", lr);
    for (int pol = 0; pol < 6; ++pol) {  // 4: eco-rtn with sticky scales, 5: naive-rtn  // 0 master-rtn, 1 naive-sr, 2 eco-rtn, 3 eco-sr
      UpdatePolicy policy = pol == 0 ? UpdatePolicy::Master : (pol == 1 || pol == 5) ? UpdatePolicy::Naive : UpdatePolicy::Eco;
      Rounding rnd = (pol == 1 || pol == 3) ? Rounding::SR : Rounding::RTN;
      Rng rng(1);
      std::vector<float> target(n), master(n), grad(n), m(n, 0), v(n, 0), scales(rows, 0);
      std::vector<uint8_t> codes(n, 0);
      for (auto& t : target) t = float(0.02 * rng.normal());
      for (int i = 0; i < n; ++i) master[i] = float(0.02 * rng.normal());
      // initial quantize
      for (int r = 0; r < rows; ++r) {
        float a = 0; for (int c = 0; c < cols; ++c) a = fmaxf(a, fabsf(master[r*cols+c]));
        scales[r] = group_scale(QFormat::E4M3, a);
        for (int c = 0; c < cols; ++c) codes[r*cols+c] = quantize_value(QFormat::E4M3, Rounding::RTN, master[r*cols+c], scales[r], 0);
      }
      double mse = 0; int cnt = 0;
      for (int t = 1; t <= T; ++t) {
        for (int i = 0; i < n; ++i) {
          const float w = dequantize_value(QFormat::E4M3, codes[i], scales[i / cols]);
          grad[i] = (w - target[i]) + float(0.01 * rng.normal());
        }
        RuleStep c{RuleKind::AdamW, float(lr), 0.9f, 0.98f, 1e-9f, 0.0f, 1.0f, float(1 - pow(0.9, t)), float(1 - pow(0.98, t))};
        StickyScale q{{QFormat::E4M3, rnd, 7, uint64_t(t), 0}};
        QuantizedUpdateBuffers<float, float> b{codes.data(), master.data(), grad.data(), m.data(), v.data()};
        for (int r = 0; r < rows; ++r) {
          q.floor_scale = pol == 4 ? scales[r] : 0.0f;
          quantized_update_group(AdamWRule{c}, q, policy, b, scale_group_span(Granularity::PerRow, rows, cols, r), &scales[r]);
        }
        if (t > T - 500) {
          for (int i = 0; i < n; ++i) { double d = dequantize_value(QFormat::E4M3, codes[i], scales[i / cols]) - target[i]; mse += d * d; }
          cnt += n;
        }
      }
      const char* names[] = {"mw-rtn", "naive-sr", "eco-rtn", "eco-sr", "eco-rtn-sticky", "naive-rtn"};
      printf("  %s %.3e", names[pol], mse / cnt);
    }
    printf("\n");
  }
}
