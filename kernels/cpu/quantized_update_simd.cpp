// The vector quantized update's dispatch: which path this CPU runs (cpuid, ECO_CPU_SIMD) and the
// calls into the AVX-512 and AVX2 files, built for their instruction sets.
#include "kernels/cpu/quantized_update_simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"

namespace eco::cpu_simd {

#if defined(__x86_64__)
// Defined in quantized_update_avx512.cpp / quantized_update_avx2.cpp, compiled for their sets.
namespace avx512 {
float pass1(const LaneRule&, QFormat, UpdatePolicy, const LaneBuffers&, int64_t, int64_t, float,
            const LaneCarry&);
void pass2(const LaneRule&, QFormat, Rounding, UpdatePolicy, const LaneBuffers&, int64_t, int64_t,
           float, float, const uint32_t*, const LaneCarry&);
void sr_bits(const FormatQuantizer&, uint64_t, int64_t, uint32_t*);
void plain_step(const LaneRule&, float*, const float*, float*, float*, int64_t, bool);
void dequantize(QFormat, const uint8_t*, int64_t, int64_t, float, float*);
}  // namespace avx512
namespace avx2 {
float pass1(const LaneRule&, QFormat, UpdatePolicy, const LaneBuffers&, int64_t, int64_t, float,
            const LaneCarry&);
void pass2(const LaneRule&, QFormat, Rounding, UpdatePolicy, const LaneBuffers&, int64_t, int64_t,
           float, float, const uint32_t*, const LaneCarry&);
void sr_bits(const FormatQuantizer&, uint64_t, int64_t, uint32_t*);
void plain_step(const LaneRule&, float*, const float*, float*, float*, int64_t, bool);
void dequantize(QFormat, const uint8_t*, int64_t, int64_t, float, float*);
}  // namespace avx2
#endif

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

int isa_lanes(Isa isa) { return isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 1; }

Isa best_isa() {
#if defined(__x86_64__)
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return Isa::Avx512;
    return __builtin_cpu_supports("avx2") ? Isa::Avx2 : Isa::Scalar;
  }();
  return best;
#else
  return Isa::Scalar;
#endif
}

namespace {

void check_supported(Isa isa, const char* what) {
  if (int(isa) > int(best_isa()))
    usage_error("{}: the {} path needs a CPU with {}; this one runs at most the {} path", what,
                isa_name(isa), isa == Isa::Avx512 ? "AVX-512 (F, BW, DQ, VL)" : "AVX2",
                isa_name(best_isa()));
}

Isa isa_from_env() {
  const char* env = std::getenv("ECO_CPU_SIMD");
  if (!env || !*env) return best_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (std::strcmp(env, isa_name(isa)) == 0) {
      check_supported(isa, (std::string("ECO_CPU_SIMD=") + env).c_str());
      return isa;
    }
  usage_error("ECO_CPU_SIMD={}: expected scalar, avx2 or avx512 (or unset: the CPU's best, {})",
              env, isa_name(best_isa()));
}

std::atomic<int> forced{-1};  // set_active_isa's choice, -1: none

}  // namespace

Isa active_isa() {
  const int f = forced.load(std::memory_order_relaxed);
  if (f >= 0) return Isa(f);
  static const Isa from_env = isa_from_env();
  return from_env;
}

void set_active_isa(Isa isa) {
  check_supported(isa, "set_active_isa");
  forced.store(int(isa), std::memory_order_relaxed);
}

float pass1(Isa isa, const LaneRule& rule, QFormat format, UpdatePolicy policy,
            const LaneBuffers& b, int64_t i0, int64_t n, float old_scale, const LaneCarry& carry) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return avx512::pass1(rule, format, policy, b, i0, n, old_scale, carry);
  if (isa == Isa::Avx2) return avx2::pass1(rule, format, policy, b, i0, n, old_scale, carry);
#endif
  runtime_error("vector pass 1 on the {} path", isa_name(isa));
}

void pass2(Isa isa, const LaneRule& rule, QFormat format, Rounding rounding, UpdatePolicy policy,
           const LaneBuffers& b, int64_t i0, int64_t n, float old_scale, float new_scale,
           const uint32_t* bits, const LaneCarry& carry) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512)
    return avx512::pass2(rule, format, rounding, policy, b, i0, n, old_scale, new_scale, bits,
                         carry);
  if (isa == Isa::Avx2)
    return avx2::pass2(rule, format, rounding, policy, b, i0, n, old_scale, new_scale, bits, carry);
#endif
  runtime_error("vector pass 2 on the {} path", isa_name(isa));
}

void sr_bits(Isa isa, const FormatQuantizer& q, uint64_t first, int64_t n, uint32_t* out) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return avx512::sr_bits(q, first, n, out);
  if (isa == Isa::Avx2) return avx2::sr_bits(q, first, n, out);
#endif
  runtime_error("vector SR draws on the {} path", isa_name(isa));
}

void plain_step(Isa isa, const LaneRule& rule, float* w, const float* grad, float* m, float* v,
                int64_t n, bool stream) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return avx512::plain_step(rule, w, grad, m, v, n, stream);
  if (isa == Isa::Avx2) return avx2::plain_step(rule, w, grad, m, v, n, stream);
#endif
  runtime_error("vector plain step on the {} path", isa_name(isa));
}

void dequantize(Isa isa, QFormat format, const uint8_t* codes, int64_t i0, int64_t n, float scale,
                float* out) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return avx512::dequantize(format, codes, i0, n, scale, out);
  if (isa == Isa::Avx2) return avx2::dequantize(format, codes, i0, n, scale, out);
#endif
  runtime_error("vector dequantize on the {} path", isa_name(isa));
}

}  // namespace eco::cpu_simd
