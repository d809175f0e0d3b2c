// The vector path of the CPU's fused quantized update (kernels/cpu/quantized_update.h): AVX-512 or
// AVX2 lanes running eco_update.h's two passes on contiguous runs of elements, for AdamW and SGDM
// with E4M3 or INT4 codes, RTN or SR, fp32 or bf16 moments, every policy. Every lane performs the
// scalar code's operations in its order (no FMA: the build has -ffp-contract=off; IEEE division
// and sqrt; the same Philox words per element), so the bytes written are those of the scalar
// code, which stays the reference (tests/unit/test_quantized_update_simd.cpp).
// The plain fp32 step of the same rules (and sign SGDM) and the dequantization of E4M3 / INT4 codes
// run on the same lanes (plain_step, dequantize), likewise reproducing their scalar code.
// The path is picked at run time from the CPU (cpuid); ECO_CPU_SIMD=scalar|avx2|avx512 forces one.
// The vector code is compiled for its instruction set function by function, so the binary still
// runs, on the scalar path, on a CPU without AVX2.
#pragma once
#include <cstdint>

#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/qformat.h"

namespace eco::cpu_simd {

enum class Isa : uint8_t { Scalar, Avx2, Avx512 };
const char* isa_name(Isa isa);
int isa_lanes(Isa isa);  // fp32 lanes per vector: 1, 8, 16
// The widest path this CPU runs (AVX-512: F, BW, DQ and VL; AVX2).
Isa best_isa();
// The path the update takes: ECO_CPU_SIMD (read once; a path beyond best_isa() or an unknown value
// is refused with a usage error), else best_isa(); set_active_isa overrides it (tests, benches).
Isa active_isa();
void set_active_isa(Isa isa);

// A rule's step terms for the lanes (AdamWRule::Terms, or SgdmRule::Terms with beta in beta1;
// sign: SignSgdmRule, whose terms are its SGDM momentum's).
struct LaneRule {
  bool adamw;
  float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps, lr, decay, inject;
  bool injects, unbiased, sign;
};
// QuantizedUpdateBuffers with the state type as a flag (m, v: float, or bf16 bits if bf16).
struct LaneBuffers {
  uint8_t* codes;
  float* master;
  const float* grad;
  void* m;
  void* v;
  bool bf16;
};

// Pass 1's theta and (AdamW under Eco) denom(v) of a run's elements, kept for pass 2 of the same
// run: pass 2 would recompute both from the old codes and the state pass 1 stored, the same
// operations on the same values, so it reads these bits instead. theta[j], denom[j]: element
// i0 + j of the run. theta null: none kept, pass 2 recomputes. Master keeps none (pass 2 reads
// the master weight).
struct LaneCarry {
  float* theta;
  float* denom;
  LaneCarry at(int64_t j) const { return theta ? LaneCarry{theta + j, denom + j} : LaneCarry{}; }
};

// quantized_update_pass1 of elements [i0, i0 + n): returns their absmax |theta|, and fills carry.
// pass2 likewise, bits[j] the SR draw of element i0 + j, carry (if kept) what pass 1 of these
// elements filled. Both: format E4M3 or INT4, n a multiple of isa_lanes(isa), i0 even for INT4
// (whole bytes), isa not Scalar.
float pass1(Isa isa, const LaneRule& rule, QFormat format, UpdatePolicy policy,
            const LaneBuffers& b, int64_t i0, int64_t n, float old_scale, const LaneCarry& carry);
void pass2(Isa isa, const LaneRule& rule, QFormat format, Rounding rounding, UpdatePolicy policy,
           const LaneBuffers& b, int64_t i0, int64_t n, float old_scale, float new_scale,
           const uint32_t* bits, const LaneCarry& carry);
// out[j] = q.draw(first + j) for j in [0, n) (SR's words, Philox across lanes); isa not Scalar.
void sr_bits(Isa isa, const FormatQuantizer& q, uint64_t first, int64_t n, uint32_t* out);

// The plain step w[j] = rule.step(w[j], grad[j], m[j], v[j]) for j in [0, n) (v: AdamW only),
// n a multiple of isa_lanes(isa), isa not Scalar. stream: w, m and v are written with
// non-temporal stores (the same bits; each pointer aligned to the vector, 4 * isa_lanes bytes).
void plain_step(Isa isa, const LaneRule& rule, float* w, const float* grad, float* m, float* v,
                int64_t n, bool stream);
// out[i] = dequantize_value(format, code i, scale) for i in [i0, i0 + n): format E4M3 or INT4,
// n a multiple of isa_lanes(isa), i0 even for INT4, isa not Scalar.
void dequantize(Isa isa, QFormat format, const uint8_t* codes, int64_t i0, int64_t n, float scale,
                float* out);

}  // namespace eco::cpu_simd
