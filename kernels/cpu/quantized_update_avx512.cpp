// The vector quantized update on AVX-512 (F, BW, DQ, VL): 16 fp32 lanes; the lane code is
// quantized_update_lanes.h, compiled here for AVX-512 only (the target pragma below comes after
// every shared header, so their inline functions keep the build's own target).
// GCC 12's intrinsics seed results with _mm512_undefined_*() (a self-initialised variable), which
// -Wuninitialized (at -O1) and -Wmaybe-uninitialized (at -O2 and above) report as a read of an
// uninitialised value: a false positive inside the compiler's own headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/math/philox.h"
#include "kernels/cpu/quantized_update_simd.h"

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#endif

namespace eco::cpu_simd::avx512 {
namespace {

struct V {
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  static constexpr int kLanes = 16;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static void stream(float* p, F x) { _mm512_stream_ps(p, x); }  // p 64-byte aligned
  static void fence() { _mm_sfence(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F abs(F a) { return asf(and_(asi(a), set1i(0x7FFFFFFFu))); }
  static F floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F rint(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_CUR_DIRECTION); }
  static float hmax(F a) { return _mm512_reduce_max_ps(a); }

  static I zeroi() { return _mm512_setzero_si512(); }
  static I set1i(uint32_t x) { return _mm512_set1_epi32(int(x)); }
  static I iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static I loadi(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static I subi(I a, I b) { return _mm512_sub_epi32(a, b); }
  template <int k> static I srli(I a) { return _mm512_srli_epi32(a, k); }
  template <int k> static I slli(I a) { return _mm512_slli_epi32(a, k); }
  static I min_u32(I a, I b) { return _mm512_min_epu32(a, b); }
  static I asi(F a) { return _mm512_castps_si512(a); }
  static F asf(I a) { return _mm512_castsi512_ps(a); }
  static F cvt_i32(I a) { return _mm512_cvtepi32_ps(a); }
  static I cvtt_i32(F a) { return _mm512_cvttps_epi32(a); }
  static I cvtt_u32(F a) { return _mm512_cvttps_epu32(a); }

  static M eq32(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static M gt_i32(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M lt_u32(I a, I b) { return _mm512_cmplt_epu32_mask(a, b); }
  static M ge_f(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static M gt_f(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M lt_f(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static I select(M m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }
  static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static I add_one_if(M m, I a) { return _mm512_mask_add_epi32(a, m, a, set1i(1)); }

  // E4M3: 16 bytes; INT4: 8 bytes, element 2k in byte k's low nibble, 2k + 1 in its high one.
  static I load_u8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_u8(uint8_t* p, I c) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c));
  }
  static I nibble_shifts() { return _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0); }
  static I load_u4(const uint8_t* p) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const I bytes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, x));  // lane j: byte j / 2
    return and_(_mm512_srlv_epi32(bytes, nibble_shifts()), set1i(0x0Fu));
  }
  static void store_u4(uint8_t* p, I c) {
    const I s = _mm512_sllv_epi32(c, nibble_shifts());
    const I pairs = or_(s, _mm512_srli_epi64(s, 32));  // each 64-bit lane's low byte
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm512_cvtepi64_epi8(pairs));
  }
  static F load_bf16(const uint16_t* p) {
    const I h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return asf(slli<16>(h));
  }
  static void store_u16(uint16_t* p, I x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(x));
  }

  // Per lane: the 64-bit product a * k as its high and low words.
  static void mul_hilo(I a, I k, I& hi, I& lo) {
    const I even = _mm512_mul_epu32(a, k), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), k);
    hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  }
  // w_k lane j = word k of group j; out[4 j + k] = that word.
  static void store_transposed(I w0, I w1, I w2, I w3, uint32_t* out) {
    const I t0 = _mm512_unpacklo_epi32(w0, w1), t1 = _mm512_unpackhi_epi32(w0, w1);
    const I t2 = _mm512_unpacklo_epi32(w2, w3), t3 = _mm512_unpackhi_epi32(w2, w3);
    // r_k, 128-bit lane l: the four words of group 4 l + k
    const I r0 = _mm512_unpacklo_epi64(t0, t2), r1 = _mm512_unpackhi_epi64(t0, t2);
    const I r2 = _mm512_unpacklo_epi64(t1, t3), r3 = _mm512_unpackhi_epi64(t1, t3);
    const I a = _mm512_shuffle_i32x4(r0, r1, 0x44), b = _mm512_shuffle_i32x4(r2, r3, 0x44);
    const I c = _mm512_shuffle_i32x4(r0, r1, 0xEE), d = _mm512_shuffle_i32x4(r2, r3, 0xEE);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(a, b, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(a, b, 0xDD));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(c, d, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(c, d, 0xDD));
  }
};

#include "kernels/cpu/quantized_update_lanes.h"

}  // namespace

float pass1(const LaneRule& rule, QFormat format, UpdatePolicy policy, const LaneBuffers& b,
            int64_t i0, int64_t n, float old_scale, const LaneCarry& carry) {
  return lanes_pass1(rule, format, policy, b, i0, n, old_scale, carry);
}
void pass2(const LaneRule& rule, QFormat format, Rounding rounding, UpdatePolicy policy,
           const LaneBuffers& b, int64_t i0, int64_t n, float old_scale, float new_scale,
           const uint32_t* bits, const LaneCarry& carry) {
  lanes_pass2(rule, format, rounding, policy, b, i0, n, old_scale, new_scale, bits, carry);
}
void sr_bits(const FormatQuantizer& q, uint64_t first, int64_t n, uint32_t* out) {
  lanes_sr_bits(q, first, n, out);
}
void plain_step(const LaneRule& rule, float* w, const float* grad, float* m, float* v, int64_t n,
                bool stream) {
  lanes_plain_step(rule, w, grad, m, v, n, stream);
}
void dequantize(QFormat format, const uint8_t* codes, int64_t i0, int64_t n, float scale,
                float* out) {
  lanes_dequantize(format, codes, i0, n, scale, out);
}

}  // namespace eco::cpu_simd::avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // __x86_64__
