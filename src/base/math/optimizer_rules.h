// The optimizer's step coefficients (AdamWCoeffs, SgdmCoeffs: built once per step by the
// optimizer, passed unchanged to the backends and their kernels) and the one element formula of
// each rule, which plain and quantized updates share (quantized: src/base/math/eco_update.h).
#pragma once
#include <cmath>
#include <cstdint>

#include "base/math/hd.h"

namespace eco {

// sqrt in the argument's own precision on host and device alike (an unqualified sqrt(float) on
// the host would compute in double and break CPU/GPU bit-identity).
ECO_HD float eco_sqrt(float x) { return sqrtf(x); }
ECO_HD double eco_sqrt(double x) { return sqrt(x); }

// AdamW with decoupled weight decay. bc1, bc2 = 1 - beta^t (t from 1) are computed in double
// and rounded once to float by adamw_coeffs, so every backend sees the same bits.
struct AdamWCoeffs {
  float lr, beta1, beta2, eps;
  float weight_decay;  // per parameter: zero for parameters without decay
  float grad_scale;    // gradient clipping multiplier (1 = no clipping)
  float bc1, bc2;      // 1 - beta1^t, 1 - beta2^t
};

// SGD with momentum in EMA form: m = beta*m + (1-beta)*g, theta = w*(1 - lr*wd) - lr*m.
struct SgdmCoeffs {
  float lr, beta;
  float weight_decay;  // per parameter, as for AdamW
  float grad_scale;
};

// Step t's coefficients (host only: the optimizer builds them once per step).
inline AdamWCoeffs adamw_coeffs(float lr, float beta1, float beta2, float eps, float weight_decay,
                                float grad_scale, int64_t t) {
  return {lr, beta1, beta2, eps, weight_decay, grad_scale,
          float(1.0 - std::pow(double(beta1), double(t))),
          float(1.0 - std::pow(double(beta2), double(t)))};
}

// The same step for a parameter with its own weight decay.
ECO_HD AdamWCoeffs with_weight_decay(AdamWCoeffs c, float wd) {
  c.weight_decay = wd;
  return c;
}
ECO_HD SgdmCoeffs with_weight_decay(SgdmCoeffs c, float wd) {
  c.weight_decay = wd;
  return c;
}

// ---- the element math (T = float in the kernels, double in the fp64 backend and the tests) ---
// A rule is built from the step's coefficients and derives the step's uniform terms (1 - beta1,
// 1 - lr*wd, the ECO injection's coefficient, ...) once, at construction: the GPU's per-element
// loops would otherwise recompute them per element (the compiler does not keep them across the
// divisions' slow-path calls). Build a new rule rather than changing the coefficients.
//
// AdamW, PyTorch's decoupled form (torch.optim.AdamW: p *= 1 - lr*wd, then the Adam step):
//   m = b1*m + (1-b1)*g,  v = b2*v + (1-b2)*g*g,  g = grad * grad_scale
//   d = sqrt(v/bc2) + eps,  theta = w*(1 - lr*wd) - lr*(m/bc1)/d
// ECO's injection (ECO.md): m + (bc1/lr)*(1 - 1/b1)*d*e, e = theta - dequant(W_q').
template <class T = float>
class AdamWRule {
 public:
  static constexpr bool kHasV = true;

  ECO_HD explicit AdamWRule(const AdamWCoeffs& c)
      : grad_scale_(T(c.grad_scale)), beta1_(T(c.beta1)), one_minus_beta1_(T(1) - T(c.beta1)),
        beta2_(T(c.beta2)), one_minus_beta2_(T(1) - T(c.beta2)), bc1_(T(c.bc1)), bc2_(T(c.bc2)),
        eps_(T(c.eps)), lr_(T(c.lr)), decay_(T(1) - T(c.lr) * T(c.weight_decay)),
        // No injection when lr == 0 (nothing to pay back, and the coefficient is infinite) or
        // b1 == 0 (no momentum to carry it). (1 - 1/b1) is evaluated as (b1 - 1)/b1, which is
        // exact in the subtraction.
        injects_(!(c.lr == 0.0f || c.beta1 == 0.0f)),
        inject_(injects_ ? (T(c.bc1) / T(c.lr)) * ((T(c.beta1) - T(1)) / T(c.beta1)) : T(0)),
        unbiased_(c.bc1 == 1.0f && c.bc2 == 1.0f) {}

  ECO_HD void moments(T grad, T& m, T& v) const {
    const T g = grad * grad_scale_;
    m = beta1_ * m + one_minus_beta1_ * g;
    v = beta2_ * v + one_minus_beta2_ * g * g;
  }
  // d = sqrt(v/bc2) + eps: the step's denominator, shared by theta and the injection.
  ECO_HD T denom(T v) const { return eco_sqrt(unbiased_ ? v : v / bc2_) + eps_; }
  // theta from the old weight w and the updated m, v.
  ECO_HD T theta(T w, T m, T v) const { return theta_d(w, m, denom(v)); }
  ECO_HD T theta_d(T w, T m, T d) const { return w * decay_ - lr_ * (unbiased_ ? m : m / bc1_) / d; }
  ECO_HD T inject(T m, T v, T e) const { return inject_d(m, denom(v), e); }
  ECO_HD T inject_d(T m, T d, T e) const { return injects_ ? m + inject_ * d * e : m; }
  // The plain (unquantized) step: m, v in place, returns the new weight.
  ECO_HD T step(T w, T grad, T& m, T& v) const {
    moments(grad, m, v);
    return theta(w, m, v);
  }

  ECO_HD bool injects() const { return injects_; }
  // bc1 == bc2 == 1: beta^t has dropped below 2^-25 for both (from step ~860 at betas 0.9 /
  // 0.98, ~1700 at 0.99), and m / bc1, v / bc2 are m and v bit for bit (x / 1 is x; only a NaN's
  // payload could differ, which the GPU's division replaces by its canonical NaN), so the rule
  // skips the two divisions.
  ECO_HD bool unbiased() const { return unbiased_; }
  // For kernels that make unbiased() a compile-time constant: true only where unbiased() is;
  // false is always allowed (it divides by 1 where it could skip, with the same bits).
  ECO_HD void fix_unbiased(bool u) { unbiased_ = u; }

 private:
  T grad_scale_, beta1_, one_minus_beta1_, beta2_, one_minus_beta2_, bc1_, bc2_, eps_, lr_;
  T decay_;  // 1 - lr*wd
  bool injects_;
  T inject_;  // (bc1/lr) * ((beta1 - 1)/beta1), if injects_
  bool unbiased_;
};

// SGDM (SgdmCoeffs); ECO's injection: m + (1/lr)*(1 - 1/b)*e, skipped when lr == 0 or beta == 0
// as for AdamW. v is ignored (the group update passes it along for both rules).
template <class T = float>
class SgdmRule {
 public:
  static constexpr bool kHasV = false;

  ECO_HD explicit SgdmRule(const SgdmCoeffs& c)
      : grad_scale_(T(c.grad_scale)), beta_(T(c.beta)), one_minus_beta_(T(1) - T(c.beta)),
        lr_(T(c.lr)), decay_(T(1) - T(c.lr) * T(c.weight_decay)),
        injects_(!(c.lr == 0.0f || c.beta == 0.0f)),
        inject_(injects_ ? ((T(c.beta) - T(1)) / T(c.beta)) / T(c.lr) : T(0)) {}

  ECO_HD void moment(T grad, T& m) const { m = beta_ * m + one_minus_beta_ * (grad * grad_scale_); }
  ECO_HD void moments(T grad, T& m, T& /*v*/) const { moment(grad, m); }
  ECO_HD T theta(T w, T m, T /*v*/ = T(0)) const { return w * decay_ - lr_ * m; }
  ECO_HD T inject(T m, T /*v*/, T e) const { return injects_ ? m + inject_ * e : m; }
  ECO_HD T step(T w, T grad, T& m) const {
    moment(grad, m);
    return theta(w, m);
  }

  ECO_HD bool injects() const { return injects_; }

 private:
  T grad_scale_, beta_, one_minus_beta_, lr_;
  T decay_;  // 1 - lr*wd
  bool injects_;
  T inject_;  // ((beta - 1)/beta)/lr, if injects_
};

}  // namespace eco
