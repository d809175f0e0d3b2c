// The lane code of the vector quantized update, plain step and dequantization
// (quantized_update_simd.h), written once over a lane-ops type V (quantized_update_avx512.cpp,
// quantized_update_avx2.cpp): each of those files includes it once, after its target pragma,
// inside an anonymous namespace, so every function here is compiled for that file's instruction
// set only. No include guard on purpose.
//
// Each function mirrors a scalar one operation for operation (name in its comment): the same
// fp32 operations in the same order on the same operands, integer tricks only where the scalar
// code's integer result is reproduced exactly (noted where the form differs).
//
// V provides: F (fp32 lanes), I (32-bit lanes), M (a lane mask), kLanes, and the operations
// used below (loads/stores of fp32, bf16 bits, E4M3 bytes and INT4 nibbles; arithmetic;
// compares; select; the Philox multiply and the 4 x kLanes word transpose).

// ---- state: fp32 or bf16 bits (to_f32 / from_f32) --------------------------------------------

template <class S>
typename V::F load_state(const S* p) {
  if constexpr (std::is_same_v<S, float>) return V::load(p);
  else return V::load_bf16(p);
}

// Stores x rounded to S (float_to_bf16: RNE, NaN -> 0x7fff) and returns the stored value as fp32.
template <class S>
typename V::F store_state(S* p, typename V::F x) {
  if constexpr (std::is_same_v<S, float>) {
    V::store(p, x);
    return x;
  } else {
    using I = typename V::I;
    const I u = V::asi(x);
    const I lsb = V::and_(V::template srli<16>(u), V::set1i(1));
    I r = V::template srli<16>(V::addi(V::addi(u, V::set1i(0x7fffu)), lsb));
    r = V::select(V::gt_i32(V::and_(u, V::set1i(0x7fffffffu)), V::set1i(0x7f800000u)),
                  V::set1i(0x7fffu), r);
    V::store_u16(p, r);
    return V::asf(V::template slli<16>(r));
  }
}

// ---- codes (load_code / store_code; INT4 at an even element: whole bytes) --------------------

template <QFormat kFormat>
typename V::I load_codes(const uint8_t* codes, int64_t i) {
  if constexpr (kFormat == QFormat::INT4) return V::load_u4(codes + (i >> 1));
  else return V::load_u8(codes + i);
}
template <QFormat kFormat>
void store_codes(uint8_t* codes, int64_t i, typename V::I c) {
  if constexpr (kFormat == QFormat::INT4) V::store_u4(codes + (i >> 1), c);
  else V::store_u8(codes + i, c);
}

// decode (fp8_e4m3_decode; INT4: the nibble as a two's complement integer)
template <QFormat kFormat>
typename V::F decode(typename V::I c) {
  using I = typename V::I;
  if constexpr (kFormat == QFormat::INT4) {
    const I nibble = V::and_(c, V::set1i(0x0Fu));
    return V::cvt_i32(V::subi(V::xor_(nibble, V::set1i(8)), V::set1i(8)));
  } else {
    const I sign = V::template slli<24>(V::and_(c, V::set1i(0x80u)));
    const I mag = V::template slli<20>(V::and_(c, V::set1i(0x7Fu)));
    const typename V::F v = V::mul(V::asf(V::or_(sign, mag)), V::set1(0x1.0p120f));
    return V::select(V::eq32(V::and_(c, V::set1i(0x7Fu)), V::set1i(0x7Fu)),
                     V::asf(V::or_(sign, V::set1i(0x7FC00000u))), v);
  }
}

// ---- encode (qcodec::fp8_encode<3, 7, 0x7E, kSr>; INT4: int_encode(y, 7, kSr) & 0x0F) ---------

// E4M3: both of fp8_encode's paths on every lane, the normal one kept where |y| >= 2^-6.
template <bool kSr>
typename V::I encode_e4m3(typename V::F y, typename V::I bits) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr uint32_t kOffset = 120u << 3, kMinNormal = 121u << 23;
  const I u = V::asi(y), a = V::and_(u, V::set1i(0x7FFFFFFFu));
  const I sign = V::and_(V::template srli<24>(u), V::set1i(0x80u));
  const auto normal = V::gt_i32(a, V::set1i(kMinNormal - 1));  // a < 2^31: signed is unsigned
  const F t = V::mul(V::asf(a), V::set1(512.0f));  // |y| in subnormal steps
  I code;
  if constexpr (kSr) {
    const F whole = V::floor(t);
    const I truncated = V::select(normal, V::subi(V::template srli<20>(a), V::set1i(kOffset)),
                                  V::cvtt_i32(whole));
    const I threshold = V::select(normal, V::template slli<12>(a),
                                  V::cvtt_u32(V::mul(V::sub(t, whole), V::set1(0x1.0p32f))));
    code = V::add_one_if(V::lt_u32(bits, threshold), truncated);
  } else {
    const I rounded = V::addi(V::addi(a, V::set1i((1u << 19) - 1u)),
                              V::and_(V::template srli<20>(a), V::set1i(1)));
    code = V::select(normal, V::subi(V::template srli<20>(rounded), V::set1i(kOffset)),
                     V::cvtt_i32(V::rint(t)));
  }
  code = V::min_u32(code, V::set1i(0x7Eu));  // satfinite
  return V::select(V::gt_i32(a, V::set1i(0x7F800000u)), V::set1i(0x7Fu), V::or_(sign, code));
}

// INT4 in fp32 rather than int_encode's shifted significand, with the same integers: for
// |y| < 7, shift_round_rne(sig, shift) is |y| rounded half to even, i.e. rint(|y|), and
// shift_round_sr's threshold is floor(frac(|y|) * 2^32) (exact for shift <= 32, the floor of
// the shifted-out fraction beyond), with frac(|y|) = |y| - floor(|y|) and the product exact.
template <bool kSr>
typename V::I encode_int4(typename V::F y, typename V::I bits) {
  using I = typename V::I;
  using F = typename V::F;
  const I u = V::asi(y), a = V::and_(u, V::set1i(0x7FFFFFFFu));
  const F mag = V::asf(a);
  I q;
  if constexpr (kSr) {
    const F whole = V::floor(mag);
    const I threshold = V::cvtt_u32(V::mul(V::sub(mag, whole), V::set1(0x1.0p32f)));
    q = V::add_one_if(V::lt_u32(bits, threshold), V::cvtt_i32(whole));
  } else {
    q = V::cvtt_i32(V::rint(mag));
  }
  q = V::select(V::ge_f(mag, V::set1(7.0f)), V::set1i(7), q);     // saturate (inf included)
  q = V::select(V::gt_i32(a, V::set1i(0x7F800000u)), V::zeroi(), q);  // NaN -> 0
  q = V::select(V::gt_i32(V::zeroi(), u), V::subi(V::zeroi(), q), q);  // sign bit set
  return V::and_(q, V::set1i(0x0Fu));
}

template <QFormat kFormat, bool kSr>
typename V::I encode(typename V::F y, typename V::I bits) {
  if constexpr (kFormat == QFormat::INT4) return encode_int4<kSr>(y, bits);
  else return encode_e4m3<kSr>(y, bits);
}

// ---- the rules (AdamWRule / SgdmRule, term for term) -----------------------------------------

struct LaneTerms {
  typename V::F grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps, lr,
      decay, inject;
  bool injects;
  explicit LaneTerms(const cpu_simd::LaneRule& r)
      : grad_scale(V::set1(r.grad_scale)), beta1(V::set1(r.beta1)),
        one_minus_beta1(V::set1(r.one_minus_beta1)), beta2(V::set1(r.beta2)),
        one_minus_beta2(V::set1(r.one_minus_beta2)), bc1(V::set1(r.bc1)), bc2(V::set1(r.bc2)),
        eps(V::set1(r.eps)), lr(V::set1(r.lr)), decay(V::set1(r.decay)),
        inject(V::set1(r.inject)), injects(r.injects) {}
};

// moments
template <bool kAdamW>
void moments(const LaneTerms& t, typename V::F grad, typename V::F& m, typename V::F& v) {
  if constexpr (kAdamW) {
    const typename V::F g = V::mul(grad, t.grad_scale);
    m = V::add(V::mul(t.beta1, m), V::mul(t.one_minus_beta1, g));
    v = V::add(V::mul(t.beta2, v), V::mul(V::mul(t.one_minus_beta2, g), g));
  } else {
    m = V::add(V::mul(t.beta1, m), V::mul(t.one_minus_beta1, V::mul(grad, t.grad_scale)));
  }
}

// AdamWRule::denom
template <bool kUnbiased>
typename V::F denom(const LaneTerms& t, typename V::F v) {
  return V::add(V::sqrt(kUnbiased ? v : V::div(v, t.bc2)), t.eps);
}

// theta (AdamW: theta_d with d = denom(v))
template <bool kAdamW, bool kUnbiased>
typename V::F theta(const LaneTerms& t, typename V::F w, typename V::F m, typename V::F d) {
  if constexpr (kAdamW) {
    const typename V::F mh = kUnbiased ? m : V::div(m, t.bc1);
    return V::sub(V::mul(w, t.decay), V::div(V::mul(t.lr, mh), d));
  } else {
    return V::sub(V::mul(w, t.decay), V::mul(t.lr, m));
  }
}

// inject (AdamW: inject_d)
template <bool kAdamW>
typename V::F inject(const LaneTerms& t, typename V::F m, typename V::F d, typename V::F e) {
  if (!t.injects) return m;
  if constexpr (kAdamW) return V::add(m, V::mul(V::mul(t.inject, d), e));
  else return V::add(m, V::mul(t.inject, e));
}

// ---- the two passes (quantized_update_pass1 / _pass2) ----------------------------------------

struct Variant {
  bool adamw, bf16, unbiased, sr;
  QFormat format;
  UpdatePolicy policy;
};

template <bool kAdamW, class S, QFormat kFormat, UpdatePolicy kPolicy, bool kUnbiased, bool kSr>
struct Passes {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr bool kCarriesDenom = kAdamW && kPolicy == UpdatePolicy::Eco;  // inject_d's d

  // c: theta (and d where kCarriesDenom) kept, unless kPolicy is Master or c.theta is null.
  static float pass1(const LaneTerms& t, const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n,
                     float old_scale, const cpu_simd::LaneCarry& c) {
    S* ms = static_cast<S*>(b.m);
    S* vs = static_cast<S*>(b.v);
    const F old = V::set1(old_scale);
    F absmax = V::zero();
    for (int64_t i = i0; i < i0 + n; i += V::kLanes) {
      F m = load_state<S>(ms + i), v = V::zero();
      if constexpr (kAdamW) v = load_state<S>(vs + i);
      moments<kAdamW>(t, V::load(b.grad + i), m, v);
      m = store_state<S>(ms + i, m);
      if constexpr (kAdamW) v = store_state<S>(vs + i, v);
      const F w = kPolicy == UpdatePolicy::Master
                      ? V::load(b.master + i)
                      : V::mul(decode<kFormat>(load_codes<kFormat>(b.codes, i)), old);
      const F d = kAdamW ? denom<kUnbiased>(t, v) : V::zero();
      const F th = theta<kAdamW, kUnbiased>(t, w, m, d);
      if constexpr (kPolicy == UpdatePolicy::Master) {
        V::store(b.master + i, th);
      } else if (c.theta) {
        V::store(c.theta + (i - i0), th);
        if constexpr (kCarriesDenom) V::store(c.denom + (i - i0), d);
      }
      absmax = V::max(V::abs(th), absmax);  // max_ps returns its second operand on NaN: fmaxf
    }
    return V::hmax(absmax);
  }

  // theta and d read from pass 1's c where kept: the bits the recomputation below gives.
  static void pass2(const LaneTerms& t, const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n,
                    float old_scale, float new_scale, const uint32_t* bits,
                    const cpu_simd::LaneCarry& c) {
    S* ms = static_cast<S*>(b.m);
    S* vs = static_cast<S*>(b.v);
    const F old = V::set1(old_scale), scale = V::set1(new_scale);
    const bool zero_scale = new_scale == 0.0f;  // quantize_value: the code of 0
    const I zero_code = encode<kFormat, false>(V::zero(), V::zeroi());
    for (int64_t i = i0; i < i0 + n; i += V::kLanes) {
      const I rb = kSr ? V::loadi(bits + (i - i0)) : V::zeroi();
      F th, m = V::zero(), d = V::zero();
      if constexpr (kPolicy == UpdatePolicy::Master) {
        th = V::load(b.master + i);
      } else if (c.theta) {
        th = V::load(c.theta + (i - i0));
        if constexpr (kPolicy == UpdatePolicy::Eco) m = load_state<S>(ms + i);
        if constexpr (kCarriesDenom) d = V::load(c.denom + (i - i0));
      } else {
        m = load_state<S>(ms + i);
        if constexpr (kAdamW) d = denom<kUnbiased>(t, load_state<S>(vs + i));
        th = theta<kAdamW, kUnbiased>(t, V::mul(decode<kFormat>(load_codes<kFormat>(b.codes, i)), old),
                                      m, d);
      }
      const I code = zero_scale ? zero_code : encode<kFormat, kSr>(V::div(th, scale), rb);
      store_codes<kFormat>(b.codes, i, code);
      if constexpr (kPolicy == UpdatePolicy::Eco) {
        const F e = V::sub(th, V::mul(decode<kFormat>(code), scale));
        store_state<S>(ms + i, inject<kAdamW>(t, m, d, e));
      }
    }
  }
};

// Op::run<Passes<...>>(args...) for the variant's template arguments.
template <class Op, bool kAdamW, class S, QFormat kFormat, UpdatePolicy kPolicy, bool kUnbiased,
          class... Args>
auto with_sr(const Variant& x, Args&&... args) {
  if (x.sr) return Op::template run<Passes<kAdamW, S, kFormat, kPolicy, kUnbiased, true>>(args...);
  return Op::template run<Passes<kAdamW, S, kFormat, kPolicy, kUnbiased, false>>(args...);
}
template <class Op, bool kAdamW, class S, QFormat kFormat, UpdatePolicy kPolicy, class... Args>
auto with_unbiased(const Variant& x, Args&&... args) {
  if constexpr (kAdamW)
    if (x.unbiased) return with_sr<Op, kAdamW, S, kFormat, kPolicy, true>(x, args...);
  return with_sr<Op, kAdamW, S, kFormat, kPolicy, false>(x, args...);
}
template <class Op, bool kAdamW, class S, QFormat kFormat, class... Args>
auto with_policy(const Variant& x, Args&&... args) {
  switch (x.policy) {
    case UpdatePolicy::Master:
      return with_unbiased<Op, kAdamW, S, kFormat, UpdatePolicy::Master>(x, args...);
    case UpdatePolicy::Naive:
      return with_unbiased<Op, kAdamW, S, kFormat, UpdatePolicy::Naive>(x, args...);
    case UpdatePolicy::Eco: break;
  }
  return with_unbiased<Op, kAdamW, S, kFormat, UpdatePolicy::Eco>(x, args...);
}
template <class Op, bool kAdamW, class S, class... Args>
auto with_format(const Variant& x, Args&&... args) {
  if (x.format == QFormat::INT4) return with_policy<Op, kAdamW, S, QFormat::INT4>(x, args...);
  return with_policy<Op, kAdamW, S, QFormat::E4M3>(x, args...);
}
template <class Op, class... Args>
auto with_variant(const Variant& x, Args&&... args) {
  if (x.adamw) {
    if (x.bf16) return with_format<Op, true, uint16_t>(x, args...);
    return with_format<Op, true, float>(x, args...);
  }
  if (x.bf16) return with_format<Op, false, uint16_t>(x, args...);
  return with_format<Op, false, float>(x, args...);
}

struct Pass1Op {
  template <class P>
  static float run(const LaneTerms& t, const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n,
                   float old_scale, const cpu_simd::LaneCarry& c) {
    return P::pass1(t, b, i0, n, old_scale, c);
  }
};
struct Pass2Op {
  template <class P>
  static int run(const LaneTerms& t, const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n,
                 float old_scale, float new_scale, const uint32_t* bits,
                 const cpu_simd::LaneCarry& c) {
    P::pass2(t, b, i0, n, old_scale, new_scale, bits, c);
    return 0;
  }
};

float lanes_pass1(const cpu_simd::LaneRule& rule, QFormat format, UpdatePolicy policy,
                  const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n, float old_scale,
                  const cpu_simd::LaneCarry& carry) {
  const Variant x{rule.adamw, b.bf16, rule.unbiased, false, format, policy};
  // Pass 1 draws nothing: its SR instances are never run (x.sr is false).
  return with_variant<Pass1Op>(x, LaneTerms(rule), b, i0, n, old_scale, carry);
}

void lanes_pass2(const cpu_simd::LaneRule& rule, QFormat format, Rounding rounding,
                 UpdatePolicy policy, const cpu_simd::LaneBuffers& b, int64_t i0, int64_t n,
                 float old_scale, float new_scale, const uint32_t* bits,
                 const cpu_simd::LaneCarry& carry) {
  const Variant x{rule.adamw, b.bf16, rule.unbiased, rounding == Rounding::SR, format, policy};
  with_variant<Pass2Op>(x, LaneTerms(rule), b, i0, n, old_scale, new_scale, bits, carry);
}

// ---- SR draws (philox_group on kLanes groups at once, words in element order) -----------------

// words[4 j + k] = philox_group(key, step, tensor_id, group + j).v[k], j < kLanes.
void philox_lanes(const PhiloxKey& key, uint64_t step, uint32_t tensor_id, uint64_t group,
                  uint32_t* words) {
  using I = typename V::I;
  const I base = V::set1i(uint32_t(group));
  I c0 = V::addi(base, V::iota());
  I c1 = V::select(V::lt_u32(c0, base), V::set1i(uint32_t(group >> 32) + 1u),
                   V::set1i(uint32_t(group >> 32)));  // the carry out of the low word
  I c2 = V::set1i(uint32_t(step)), c3 = V::set1i(tensor_id ^ uint32_t(step >> 32));
  const I m0 = V::set1i(0xD2511F53u), m1 = V::set1i(0xCD9E8D57u);
  for (int r = 0; r < 10; ++r) {  // philox4x32_round
    I hi0, lo0, hi1, lo1;
    V::mul_hilo(c0, m0, hi0, lo0);
    V::mul_hilo(c2, m1, hi1, lo1);
    c0 = V::xor_(V::xor_(hi1, c1), V::set1i(key.k0[r]));
    c1 = lo1;
    c2 = V::xor_(V::xor_(hi0, c3), V::set1i(key.k1[r]));
    c3 = lo0;
  }
  V::store_transposed(c0, c1, c2, c3, words);
}

void lanes_sr_bits(const FormatQuantizer& q, uint64_t first, int64_t n, uint32_t* out) {
  constexpr int64_t kWords = 4 * V::kLanes;
  alignas(64) uint32_t words[kWords];
  const uint64_t g0 = first >> 2;
  const int64_t off = int64_t(first & 3u);
  for (int64_t lo = -off; lo < n; lo += kWords) {  // out index of the block's first word
    const uint64_t group = g0 + uint64_t((lo + off) / 4);
    if (lo >= 0 && lo + kWords <= n) {  // a whole block: straight into out
      philox_lanes(q.key, q.step, q.tensor_id, group, out + lo);
      continue;
    }
    philox_lanes(q.key, q.step, q.tensor_id, group, words);
    const int64_t from = lo > 0 ? lo : 0, to = lo + kWords < n ? lo + kWords : n;
    std::memcpy(out + from, words + (from - lo), size_t(to - from) * sizeof(uint32_t));
  }
}

// ---- the plain fp32 step (AdamWRule / SgdmRule / SignSgdmRule::step, term for term) ----------

template <bool kStream>
void store_weight(float* p, typename V::F x) {
  if constexpr (kStream) V::stream(p, x);
  else V::store(p, x);
}

enum class PlainRule { AdamW, Sgdm, SignSgdm };

template <PlainRule kRule, bool kUnbiased, bool kStream>
void plain_steps(const LaneTerms& t, float* w, const float* grad, float* m, float* v, int64_t n) {
  using F = typename V::F;
  constexpr bool kAdamW = kRule == PlainRule::AdamW;
  for (int64_t i = 0; i < n; i += V::kLanes) {
    F mi = V::load(m + i), vi = V::zero();
    if constexpr (kAdamW) vi = V::load(v + i);
    moments<kAdamW>(t, V::load(grad + i), mi, vi);
    const F wi = V::load(w + i);
    F th;
    if constexpr (kRule == PlainRule::SignSgdm) {
      // SignSgdmRule::theta: sign(m) is 1, -1, or 0 (for zeros and NaN)
      const F sign = V::select(V::gt_f(mi, V::zero()), V::set1(1.0f),
                               V::select(V::lt_f(mi, V::zero()), V::set1(-1.0f), V::zero()));
      th = V::sub(V::mul(wi, t.decay), V::mul(t.lr, sign));
    } else {
      th = theta<kAdamW, kUnbiased>(t, wi, mi, kAdamW ? denom<kUnbiased>(t, vi) : V::zero());
    }
    store_weight<kStream>(w + i, th);
    store_weight<kStream>(m + i, mi);
    if constexpr (kAdamW) store_weight<kStream>(v + i, vi);
  }
  if constexpr (kStream) V::fence();  // the streamed lines before any later load of them
}

template <PlainRule kRule, bool kUnbiased>
void plain_steps(const LaneTerms& t, bool stream, float* w, const float* grad, float* m, float* v,
                 int64_t n) {
  if (stream) plain_steps<kRule, kUnbiased, true>(t, w, grad, m, v, n);
  else plain_steps<kRule, kUnbiased, false>(t, w, grad, m, v, n);
}

void lanes_plain_step(const cpu_simd::LaneRule& rule, float* w, const float* grad, float* m,
                      float* v, int64_t n, bool stream) {
  const LaneTerms t(rule);
  if (rule.adamw) {
    if (rule.unbiased) plain_steps<PlainRule::AdamW, true>(t, stream, w, grad, m, v, n);
    else plain_steps<PlainRule::AdamW, false>(t, stream, w, grad, m, v, n);
  } else if (rule.sign) {
    plain_steps<PlainRule::SignSgdm, false>(t, stream, w, grad, m, v, n);
  } else {
    plain_steps<PlainRule::Sgdm, false>(t, stream, w, grad, m, v, n);
  }
}

// ---- dequantize (dequantize_value: decode(code) * scale) -------------------------------------

template <QFormat kFormat>
void dequantize_lanes(const uint8_t* codes, int64_t i0, int64_t n, float scale, float* out) {
  const typename V::F s = V::set1(scale);
  for (int64_t i = i0; i < i0 + n; i += V::kLanes)
    V::store(out + i, V::mul(decode<kFormat>(load_codes<kFormat>(codes, i)), s));
}

void lanes_dequantize(QFormat format, const uint8_t* codes, int64_t i0, int64_t n, float scale,
                      float* out) {
  if (format == QFormat::INT4) dequantize_lanes<QFormat::INT4>(codes, i0, n, scale, out);
  else dequantize_lanes<QFormat::E4M3>(codes, i0, n, scale, out);
}
