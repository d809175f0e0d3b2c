// eco-update-cpu-bench: CPU time of the fused quantized update (kernels/cpu/quantized_update.h, the
// CPU reference the CUDA kernels match) against the plain fp32 AdamW step measured in the same
// run, on one (rows, cols) weight with one E4M3 scale per row and fp32 moments.
//   eco-update-cpu-bench [--rows R] [--cols C] [--threads T] [--repeats N]
// Defaults: 4096 x 4096, 1 thread (a ratio on a shared machine is steadier on one core), 9
// repeats. Each repeat is a new optimizer step (new SR draws, bias corrections of step t).
// The updates take turns; prints each one's minimum and median ms, ns per element (of the
// minimum) and ratio to plain AdamW: the ratio is what to compare across code changes (machines
// differ in absolute time; the minimum is the least disturbed by a busy neighbour). "late step":
// bias corrections 1, as from step ~860 of a run (AdamWRule::unbiased() skips two divisions).
// The quantized rows run on the vector path the update takes (cpu_simd::active_isa(): the CPU's
// best, or ECO_CPU_SIMD), named in brackets; one more SR row per other path this CPU runs
// (scalar: the reference code) compares them in the same run. Ratios are to the first row, the
// plain step as the compiler writes it from the rule (a scalar loop, auto-vectorised as it can);
// the second row is the backend's plain step (plain_update_tensor) on the vector path, and the
// last column the ratio to it ("AdamW[v]").
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/rng.h"
#include "base/math/optimizer_rules.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "kernels/cpu/plain_update.h"
#include "kernels/cpu/quantized_update.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace {

using clock_type = std::chrono::steady_clock;

struct Args {
  int64_t rows = 4096, cols = 4096;
  int threads = 1, repeats = 9;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: eco-update-cpu-bench [--rows R] [--cols C] [--threads T] [--repeats N]\n");
      std::exit(2);
    }
    const long long v = std::atoll(argv[++i]);
    if (k == "--rows") a.rows = v;
    else if (k == "--cols") a.cols = v;
    else if (k == "--threads") a.threads = int(v);
    else if (k == "--repeats") a.repeats = int(v);
    else {
      std::fprintf(stderr, "eco-update-cpu-bench: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.rows < 1 || a.cols < 1 || a.threads < 1 || a.repeats < 1) {
    std::fprintf(stderr, "eco-update-cpu-bench: sizes, threads and repeats must be positive\n");
    std::exit(2);
  }
  return a;
}

// AdamW at step t, with the bias corrections of step t (early: below 1) or of a late step (1, as
// from step ~860 of a run at these betas: AdamWRule::unbiased()).
eco::RuleStep coeffs(int64_t t, bool late = false) {
  const double b1 = 0.9, b2 = 0.98, tb = late ? 1e6 : double(t);
  return {eco::RuleKind::AdamW, 1e-3f, float(b1), float(b2), 1e-9f, 0.1f, 1.0f,
          float(1.0 - std::pow(b1, tb)), float(1.0 - std::pow(b2, tb))};
}

// Seconds of each call of f(t), t = 1, 2, ...
struct Timings {
  std::vector<double> s;
  double min() const { return *std::min_element(s.begin(), s.end()); }
  double median() const {
    std::vector<double> v = s;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};
void time_call(Timings& t, int64_t step, const std::function<void(int64_t)>& f) {
  const auto t0 = clock_type::now();
  f(step);
  t.s.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  omp_set_num_threads(a.threads);
  const int64_t n = a.rows * a.cols;
  const size_t count = size_t(n);

  eco::Rng rng(1);
  std::vector<float> grad(count), w(count), m(count), v(count);
  for (int64_t i = 0; i < n; ++i) {
    grad[size_t(i)] = float(rng.normal() * 1e-3);
    w[size_t(i)] = float(rng.normal() * 0.02);
    m[size_t(i)] = float(rng.normal() * 1e-4);
    v[size_t(i)] = float(rng.uniform() * 1e-6);
  }
  // Codes: random finite E4M3 codes (not 0x7F / 0xFF, the NaNs), one scale per row.
  std::vector<uint8_t> codes(count);
  for (uint8_t& c : codes) {
    c = uint8_t(rng.next_u64());
    if ((c & 0x7F) == 0x7F) c ^= 1;
  }
  std::vector<float> scales(size_t(a.rows), 0.06f / 448.0f);
  // Each update on its own copy of the state; they take turns, so that a neighbour's load on a
  // shared machine hits them alike.
  auto plain = [&](int64_t t) {
    const eco::AdamWRule<float> rule(coeffs(t));
    float* pw = w.data();
    const float* pg = grad.data();
    float* pm = m.data();
    float* pv = v.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pw[i] = rule.step(pw[i], pg[i], pm[i], pv[i]);
  };
  struct QState {
    std::vector<float> m, v, scales;
    std::vector<uint8_t> codes;
  };
  using eco::cpu_simd::Isa;
  Isa active;
  try {
    active = eco::cpu_simd::active_isa();
  } catch (const eco::Error& e) {
    std::fprintf(stderr, "eco-update-cpu-bench: %s\n", e.what());
    return 2;
  }
  struct Row {
    std::string name;
    eco::Rounding rounding;
    bool late;
    Isa isa;
  };
  const std::string tag = std::string(" [") + eco::cpu_simd::isa_name(active) + "]";
  // The backend's plain step (plain_update_tensor: the vector lanes, the same bits as `plain`).
  std::vector<float> vw = w, vm = m, vv = v;
  auto plain_lanes = [&](int64_t t) {
    eco::cpu_simd::set_active_isa(active);  // the rows below set the path they time
    const eco::AdamWRule<float> rule(coeffs(t));
    eco::plain_update_tensor(rule, vw.data(), grad.data(), vm.data(), vv.data(), n);
  };
  std::vector<Row> rows = {{"fp8-eco-rtn AdamW (E4M3)" + tag, eco::Rounding::RTN, false, active},
                           {"fp8-eco-sr AdamW (E4M3)" + tag, eco::Rounding::SR, false, active},
                           {"fp8-eco-sr AdamW, late step" + tag, eco::Rounding::SR, true, active}};
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Scalar})
    if (isa != active && int(isa) <= int(eco::cpu_simd::best_isa()))
      rows.push_back({std::string("fp8-eco-sr AdamW (E4M3) [") + eco::cpu_simd::isa_name(isa) + "]",
                      eco::Rounding::SR, false, isa});
  std::vector<QState> states(rows.size(), QState{m, v, scales, codes});
  auto quantized = [&](size_t k) {
    return [&, k](int64_t t) {
      const Row& row = rows[k];
      QState& st = states[k];
      eco::cpu_simd::set_active_isa(row.isa);
      const eco::FormatQuantizer q{eco::QFormat::E4M3, row.rounding, 1234, uint64_t(t), 7};
      const eco::QuantizedUpdateBuffers<float, float> b{st.codes.data(), nullptr, grad.data(),
                                                        st.m.data(), st.v.data()};
      eco::quantized_update_matrix(eco::AdamWRule<>{coeffs(t, row.late)}, q, eco::UpdatePolicy::Eco,
                                   b, st.scales.data(), a.rows, a.cols, eco::Granularity::PerRow);
    };
  };
  std::vector<std::function<void(int64_t)>> runs = {plain, plain_lanes};
  std::vector<std::string> names = {"fp32 AdamW (plain)", "fp32 AdamW (plain)" + tag};
  for (size_t k = 0; k < rows.size(); ++k) {
    runs.push_back(quantized(k));
    names.push_back(rows[k].name);
  }
  const size_t kRuns = runs.size();
  std::vector<Timings> times(kRuns);
  for (int r = 0; r <= a.repeats; ++r)
    for (size_t k = 0; k < kRuns; ++k) {
      if (r == 0) runs[k](1);  // warm-up
      else time_call(times[k], r + 1, runs[k]);
    }

  std::printf("eco-update-cpu-bench: %lld x %lld, %d thread(s), %d repeats\n", (long long)a.rows,
              (long long)a.cols, a.threads, a.repeats);
  std::printf("%-36s %9s %9s %9s %14s %16s %16s\n", "update", "min ms", "median ms", "ns/elem",
              "min vs AdamW", "median vs AdamW", "min vs AdamW[v]");
  for (size_t k = 0; k < kRuns; ++k)
    std::printf("%-36s %9.2f %9.2f %9.2f %14.2f %16.2f %16.2f\n", names[k].c_str(),
                times[k].min() * 1e3, times[k].median() * 1e3, times[k].min() * 1e9 / double(n),
                times[k].min() / times[0].min(), times[k].median() / times[0].median(),
                times[k].min() / times[1].min());
  return 0;
}
