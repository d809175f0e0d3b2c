// The optimizer's rules as data (RuleStep: which rule and this step's coefficients, built once
// per step by the optimizer), the one element formula of each rule, which plain and quantized
// updates share (quantized: src/base/math/eco_update.h), and the registry from one to the other.
#pragma once
#include <cmath>
#include <cstdint>

#include "base/math/hd.h"

namespace eco {

// sqrt in the argument's own precision on host and device alike (an unqualified sqrt(float) on
// the host would compute in double and break CPU/GPU bit-identity).
ECO_HD float eco_sqrt(float x) { return sqrtf(x); }
ECO_HD double eco_sqrt(double x) { return sqrt(x); }

// Which element-wise rule an update runs: the registry is with_rule, at the end of this file.
enum class RuleKind : uint8_t { AdamW, Sgdm, SignSgdm };

// One step of one rule as data: which rule, its hyperparameters and the step's terms, built once
// per step by the optimizer and passed unchanged through the backends to the kernels, which
// build the rule's templated element math from it (with_rule). Each rule reads the fields it
// names; the others keep their defaults.
struct RuleStep {
  RuleKind kind = RuleKind::AdamW;
  float lr = 0.0f;
  float beta1 = 0.0f;        // the first moment's (the momentum's) decay
  float beta2 = 0.0f;        // AdamW: the second moment's decay
  float eps = 0.0f;          // AdamW: the denominator's floor
  float weight_decay = 0.0f; // per parameter: zero for parameters without decay
  float grad_scale = 1.0f;   // gradient clipping multiplier (1 = no clipping)
  // AdamW: 1 - beta1^t, 1 - beta2^t (t from 1), computed in double and rounded once to float
  // (adamw_step), so every backend sees the same bits.
  float bc1 = 1.0f, bc2 = 1.0f;
};

// Step t of AdamW (host only: the optimizer builds it once per step).
inline RuleStep adamw_step(float lr, float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, int64_t t) {
  return {RuleKind::AdamW, lr, beta1, beta2, eps, weight_decay, grad_scale,
          float(1.0 - std::pow(double(beta1), double(t))),
          float(1.0 - std::pow(double(beta2), double(t)))};
}

// A step of SGD with momentum in EMA form (SgdmRule), or of its sign form (SignSgdmRule).
inline RuleStep momentum_step(RuleKind kind, float lr, float beta, float weight_decay,
                              float grad_scale) {
  RuleStep s;
  s.kind = kind;
  s.lr = lr;
  s.beta1 = beta;
  s.weight_decay = weight_decay;
  s.grad_scale = grad_scale;
  return s;
}
inline RuleStep sgdm_step(float lr, float beta, float weight_decay, float grad_scale) {
  return momentum_step(RuleKind::Sgdm, lr, beta, weight_decay, grad_scale);
}

// The same step for a parameter with its own weight decay.
ECO_HD RuleStep with_weight_decay(RuleStep s, float wd) {
  s.weight_decay = wd;
  return s;
}

// The stage between a rule's moments and its element-wise step: what theta reads as the
// momentum. Elementwise: the momentum itself, element by element, so the backends fuse moments,
// theta and the quantization into one pass over the elements (every rule below).
//
// A matrix optimizer transforms the momentum of a whole 2-D parameter there (Muon: theta =
// w (1 - lr wd) - lr s NS(m), NS the Newton-Schulz orthogonalisation of the (rows, cols)
// momentum). It goes in here and in the backends' drivers, not in the Backend interface, which
// already carries what it needs: the RuleStep (its kind, and the fields its hyperparameters
// add here), the parameter's 2-D shape (QTensor rows / cols, PlainUpdate::cols), its momentum
// and the row range. It adds a Direction value for its rule, and each backend's driver
// (kernels/cpu/cpu_backend.h, kernels/cuda/cuda_backend.cpp: the static_assert at with_rule's
// call) runs for such a rule: the rule's moments over the parameter (m stored), the transform of
// m into a direction buffer of the parameter's shape with the backend's own GEMMs, then the
// element stage with theta reading that buffer where an Elementwise rule reads m (the ECO
// injection still goes into m). A direction needs the whole matrix: a row range short of it
// (ZeRO-1) is refused there, or its momentum gathered first.
enum class Direction : uint8_t { Elementwise };

// ---- the element math (T = float in the kernels, double in the fp64 backend and the tests) ---
// A rule is built from the step's RuleStep and derives the step's uniform terms (1 - beta1,
// 1 - lr*wd, the ECO injection's coefficient, ...) once, at construction: the GPU's per-element
// loops would otherwise recompute them per element (the compiler does not keep them across the
// divisions' slow-path calls). Build a new rule rather than changing the coefficients.
//
// The Rule concept (what src/base/math/eco_update.h and the backends' drivers call):
//   static constexpr bool kHasV;                 a second moment v is stored (else v is ignored)
//   static constexpr bool kBiasCorrected;        unbiased() / fix_unbiased(bool) exist (AdamW)
//   static constexpr Direction kDirection;       the stage before the element step (above)
//   ECO_HD explicit Rule(const RuleStep&);
//   ECO_HD void moments(T grad, T& m, T& v) const;   the moments' update in place
//   ECO_HD T theta(T w, T m, T v) const;             the new weight from the old one, m, v
//   ECO_HD T inject(T m, T v, T e) const;            ECO's injection of the error e into m
//   ECO_HD T step(T w, T grad, T& m, T& v) const;    the plain step: moments, then theta
//   ECO_HD bool injects() const;                     false: inject(m, v, e) == m this step
// A rule is registered in with_rule below (and RuleKind); nothing else names it.
//
// AdamW, PyTorch's decoupled form (torch.optim.AdamW: p *= 1 - lr*wd, then the Adam step):
//   m = b1*m + (1-b1)*g,  v = b2*v + (1-b2)*g*g,  g = grad * grad_scale
//   d = sqrt(v/bc2) + eps,  theta = w*(1 - lr*wd) - lr*(m/bc1)/d
// ECO's injection (docs/eco.md): m + (bc1/lr)*(1 - 1/b1)*d*e, e = theta - dequant(W_q').
template <class T = float>
class AdamWRule {
 public:
  static constexpr bool kHasV = true;
  static constexpr bool kBiasCorrected = true;
  static constexpr Direction kDirection = Direction::Elementwise;

  ECO_HD explicit AdamWRule(const RuleStep& c)
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

  // The step's terms as the formulas above use them, for code that runs the same operations on
  // vector lanes (the CPU's SIMD update, kernels/cpu/quantized_update_simd.h).
  struct Terms {
    T grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps, lr, decay, inject;
    bool injects, unbiased;
  };
  ECO_HD Terms terms() const {
    return {grad_scale_, beta1_, one_minus_beta1_, beta2_, one_minus_beta2_, bc1_, bc2_, eps_,
            lr_, decay_, inject_, injects_, unbiased_};
  }

 private:
  T grad_scale_, beta1_, one_minus_beta1_, beta2_, one_minus_beta2_, bc1_, bc2_, eps_, lr_;
  T decay_;  // 1 - lr*wd
  bool injects_;
  T inject_;  // (bc1/lr) * ((beta1 - 1)/beta1), if injects_
  bool unbiased_;
};

// SGDM in EMA form: m = b*m + (1-b)*g, g = grad * grad_scale; theta = w*(1 - lr*wd) - lr*m
// (b: RuleStep::beta1). ECO's injection: m + (1/lr)*(1 - 1/b)*e, skipped when lr == 0 or b == 0
// as for AdamW. v is ignored (the group update passes it along for every rule).
template <class T = float>
class SgdmRule {
 public:
  static constexpr bool kHasV = false;
  static constexpr bool kBiasCorrected = false;
  static constexpr Direction kDirection = Direction::Elementwise;

  ECO_HD explicit SgdmRule(const RuleStep& c)
      : grad_scale_(T(c.grad_scale)), beta_(T(c.beta1)), one_minus_beta_(T(1) - T(c.beta1)),
        lr_(T(c.lr)), decay_(T(1) - T(c.lr) * T(c.weight_decay)),
        injects_(!(c.lr == 0.0f || c.beta1 == 0.0f)),
        inject_(injects_ ? ((T(c.beta1) - T(1)) / T(c.beta1)) / T(c.lr) : T(0)) {}

  ECO_HD void moment(T grad, T& m) const { m = beta_ * m + one_minus_beta_ * (grad * grad_scale_); }
  ECO_HD void moments(T grad, T& m, T& /*v*/) const { moment(grad, m); }
  ECO_HD T theta(T w, T m, T /*v*/ = T(0)) const { return w * decay_ - lr_ * m; }
  ECO_HD T inject(T m, T /*v*/, T e) const { return injects_ ? m + inject_ * e : m; }
  ECO_HD T step(T w, T grad, T& m) const {
    moment(grad, m);
    return theta(w, m);
  }
  ECO_HD T step(T w, T grad, T& m, T& /*v*/) const { return step(w, grad, m); }

  ECO_HD bool injects() const { return injects_; }

  // As AdamWRule::terms.
  struct Terms {
    T grad_scale, beta, one_minus_beta, lr, decay, inject;
    bool injects;
  };
  ECO_HD Terms terms() const {
    return {grad_scale_, beta_, one_minus_beta_, lr_, decay_, inject_, injects_};
  }

 private:
  T grad_scale_, beta_, one_minus_beta_, lr_;
  T decay_;  // 1 - lr*wd
  bool injects_;
  T inject_;  // ((beta - 1)/beta)/lr, if injects_
};

// Sign SGD with momentum: SGDM's moment (RuleStep::beta1), and a step of lr in the sign of each
// element of the momentum: theta = w*(1 - lr*wd) - lr*sign(m), sign(0) = 0. ECO's injection is
// SGDM's, so that the error steers the next steps' signs. v is ignored.
template <class T = float>
class SignSgdmRule {
 public:
  static constexpr bool kHasV = false;
  static constexpr bool kBiasCorrected = false;
  static constexpr Direction kDirection = Direction::Elementwise;

  ECO_HD explicit SignSgdmRule(const RuleStep& c)
      : momentum_(c), lr_(T(c.lr)), decay_(T(1) - T(c.lr) * T(c.weight_decay)) {}

  ECO_HD void moments(T grad, T& m, T& v) const { momentum_.moments(grad, m, v); }
  ECO_HD T theta(T w, T m, T /*v*/ = T(0)) const {
    const T sign = m > T(0) ? T(1) : m < T(0) ? T(-1) : T(0);
    return w * decay_ - lr_ * sign;
  }
  ECO_HD T inject(T m, T v, T e) const { return momentum_.inject(m, v, e); }
  ECO_HD T step(T w, T grad, T& m, T& v) const {
    moments(grad, m, v);
    return theta(w, m, v);
  }

  ECO_HD bool injects() const { return momentum_.injects(); }

  // As SgdmRule::terms: its momentum's (whose lr and decay are theta's too).
  ECO_HD typename SgdmRule<T>::Terms terms() const { return momentum_.terms(); }

 private:
  SgdmRule<T> momentum_;
  T lr_;
  T decay_;  // 1 - lr*wd
};

// ---- the registry ----------------------------------------------------------------------------

// f(rule) with s's rule built for element type T: the one place that maps a RuleKind to its
// rule, so that a driver written once over the Rule concept runs every registered rule (each
// rule instantiates the driver's templates once). Returns f's result. Host only: the backends
// dispatch on the host and launch kernels templated on the rule.
template <class T = float, class F>
decltype(auto) with_rule(const RuleStep& s, F&& f) {
  switch (s.kind) {
    case RuleKind::Sgdm: return f(SgdmRule<T>(s));
    case RuleKind::SignSgdm: return f(SignSgdmRule<T>(s));
    case RuleKind::AdamW: break;
  }
  return f(AdamWRule<T>(s));
}

}  // namespace eco
