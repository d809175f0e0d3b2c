// The vector quantized update on AVX2: 8 fp32 lanes; the lane code is quantized_update_lanes.h,
// compiled here for AVX2 only (the target pragma below comes after every shared header, so their
// inline functions keep the build's own target). Masks are vectors of all-ones lanes.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/math/philox.h"
#include "kernels/cpu/quantized_update_simd.h"

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
// GCC 12's intrinsics seed results with _mm512_undefined_*(), which -Wmaybe-uninitialized reads
// as an uninitialised variable (a false positive, inside the compiler's own headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace eco::cpu_simd::avx2 {
namespace {

struct V {
  using F = __m256;
  using I = __m256i;
  using M = __m256i;
  static constexpr int kLanes = 8;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static void stream(float* p, F x) { _mm256_stream_ps(p, x); }  // p 32-byte aligned
  static void fence() { _mm_sfence(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F abs(F a) { return asf(and_(asi(a), set1i(0x7FFFFFFFu))); }
  static F floor(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F rint(F a) { return _mm256_round_ps(a, _MM_FROUND_CUR_DIRECTION); }
  static float hmax(F a) {  // no NaN in an absmax accumulator
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    float r = t[0];
    for (int k = 1; k < 8; ++k) r = t[k] > r ? t[k] : r;
    return r;
  }

  static I zeroi() { return _mm256_setzero_si256(); }
  static I set1i(uint32_t x) { return _mm256_set1_epi32(int(x)); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I loadi(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static I subi(I a, I b) { return _mm256_sub_epi32(a, b); }
  template <int k> static I srli(I a) { return _mm256_srli_epi32(a, k); }
  template <int k> static I slli(I a) { return _mm256_slli_epi32(a, k); }
  static I min_u32(I a, I b) { return _mm256_min_epu32(a, b); }
  static I asi(F a) { return _mm256_castps_si256(a); }
  static F asf(I a) { return _mm256_castsi256_ps(a); }
  static F cvt_i32(I a) { return _mm256_cvtepi32_ps(a); }
  static I cvtt_i32(F a) { return _mm256_cvttps_epi32(a); }
  // For 0 <= a < 2^32 (what the encoders convert): [2^31, 2^32) through a - 2^31, which is exact.
  static I cvtt_u32(F a) {
    const F big = _mm256_cmp_ps(a, set1(0x1.0p31f), _CMP_GE_OQ);
    const I low = _mm256_cvttps_epi32(_mm256_sub_ps(a, _mm256_and_ps(big, set1(0x1.0p31f))));
    return xor_(low, and_(asi(big), set1i(0x80000000u)));
  }

  static M eq32(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static M gt_i32(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static M lt_u32(I a, I b) {
    const I flip = set1i(0x80000000u);
    return _mm256_cmpgt_epi32(xor_(b, flip), xor_(a, flip));
  }
  static M ge_f(F a, F b) { return asi(_mm256_cmp_ps(a, b, _CMP_GE_OQ)); }
  static M gt_f(F a, F b) { return asi(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
  static M lt_f(F a, F b) { return asi(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static I select(M m, I a, I b) { return _mm256_blendv_epi8(b, a, m); }
  static F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, asf(m)); }
  static I add_one_if(M m, I a) { return _mm256_sub_epi32(a, m); }  // m: -1 where set

  // E4M3: 8 bytes; INT4: 4 bytes, element 2k in byte k's low nibble, 2k + 1 in its high one.
  static I load_u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_u8(uint8_t* p, I c) {  // byte 0 of each lane
    const I ctrl = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                    0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const I s = _mm256_shuffle_epi8(c, ctrl);
    const __m128i x = _mm_unpacklo_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), x);
  }
  static I nibble_shifts() { return _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4); }
  static I load_u4(const uint8_t* p) {
    int32_t word;
    std::memcpy(&word, p, sizeof word);
    const __m128i x = _mm_cvtsi32_si128(word);
    const I bytes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(x, x));  // lane j: byte j / 2
    return and_(_mm256_srlv_epi32(bytes, nibble_shifts()), set1i(0x0Fu));
  }
  static void store_u4(uint8_t* p, I c) {
    const I s = _mm256_sllv_epi32(c, nibble_shifts());
    const I pairs = or_(s, _mm256_srli_epi64(s, 32));  // each 64-bit lane's low byte
    const I ctrl = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                    0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const I g = _mm256_shuffle_epi8(pairs, ctrl);
    const int32_t word = _mm_cvtsi128_si32(
        _mm_unpacklo_epi16(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1)));
    std::memcpy(p, &word, sizeof word);
  }
  static F load_bf16(const uint16_t* p) {
    const I h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return asf(slli<16>(h));
  }
  static void store_u16(uint16_t* p, I x) {  // x < 2^16 per lane
    const I packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }

  // Per lane: the 64-bit product a * k as its high and low words.
  static void mul_hilo(I a, I k, I& hi, I& lo) {
    const I even = _mm256_mul_epu32(a, k), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), k);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  }
  // w_k lane j = word k of group j; out[4 j + k] = that word.
  static void store_transposed(I w0, I w1, I w2, I w3, uint32_t* out) {
    const I t0 = _mm256_unpacklo_epi32(w0, w1), t1 = _mm256_unpackhi_epi32(w0, w1);
    const I t2 = _mm256_unpacklo_epi32(w2, w3), t3 = _mm256_unpackhi_epi32(w2, w3);
    // r_k, 128-bit lane l: the four words of group 4 l + k
    const I r0 = _mm256_unpacklo_epi64(t0, t2), r1 = _mm256_unpackhi_epi64(t0, t2);
    const I r2 = _mm256_unpacklo_epi64(t1, t3), r3 = _mm256_unpackhi_epi64(t1, t3);
    auto* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
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

}  // namespace eco::cpu_simd::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // __x86_64__
