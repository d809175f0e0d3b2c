// The CPU reference Backend: owns host buffers, forwards every operation to kernels/cpu.
// A header so that the planning backend (planning_backend.cpp) can reuse it; make_cpu_backend
// (cpu_backend.cpp) builds it.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/math/bf16.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/non_finite.h"
#include "base/math/optimizer_rules.h"
#include "base/math/qformat.h"
#include "kernels/cpu/host_op_timer.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/plain_update.h"
#include "kernels/cpu/quantized_update.h"
#include "kernels/cpu/quantize.h"
#include "base/backend.h"

namespace eco {

// Opens the operation's timing scope (train.profile).
#define ECO_CPU_OP(name) const HostOpTimer::Scope eco_op_scope_(timer_, name)

// 64-byte aligned, zero-initialised host buffer.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <class T>
class CpuBackend : public Backend {
 public:
  std::string name() const override { return std::is_same_v<T, double> ? "cpu-f64" : "cpu"; }
  bool host_memory() const override { return true; }
  DType dtype() const override { return std::is_same_v<T, double> ? DType::F64 : DType::F32; }

  // Per-operation wall-clock time (the CPU runs each operation to completion before returning).
  bool supports_profiling() const override { return true; }
  void set_profiling(bool on) override { timer_.set_enabled(on); }
  std::vector<OpTime> take_profile() override { return timer_.take(); }

  Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
               MemCategory category, bool quantizable_param) override {
    Tensor t;
    t.shape = std::move(shape);
    t.dtype = dtype;
    const size_t bytes = std::max<size_t>(t.bytes(), 1);
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) runtime_error("out of host memory allocating {} ({} bytes)", name, bytes);
    std::memset(p, 0, bytes);
    buffers_.emplace_back(p);
    t.data = p;
    ledger_.record(name, category, t.bytes(), quantizable_param);
    return t;
  }
  void zero(const Tensor& t) override { std::memset(t.data, 0, t.bytes()); }
  void add_inplace(const Tensor& acc, const Tensor& x, int64_t n) override {
    ECO_CPU_OP("add_inplace");
    T* a = p(acc);
    const T* b = p(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = a[i] + b[i];
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    ECO_CPU_OP("copy_from_host");
    std::memcpy(dst.data, src, dst.bytes());
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    ECO_CPU_OP("copy_to_host");
    std::memcpy(dst, src.data, src.bytes());
  }

  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias,
                      int N, int C, int OC) override {
    ECO_CPU_OP("matmul_forward");
    cpu::matmul_forward(p(out), p(inp), p(w), p(bias), N, C, OC);
  }
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& w, int N, int C,
                       int OC) override {
    ECO_CPU_OP("matmul_backward");
    cpu::matmul_backward(p(dinp), p(dw), p(dbias), p(dout), p(inp), p(w), N, C, OC);
  }
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe, int B, int Tn, int C) override {
    ECO_CPU_OP("embedding_forward");
    cpu::embedding_forward(p(out), tokens.as<int32_t>(), p(wte), p(wpe), B, Tn, C);
  }
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int B, int Tn, int C) override {
    ECO_CPU_OP("embedding_backward");
    cpu::embedding_backward(p(dwte), p(dwpe), p(dout), tokens.as<int32_t>(), B, Tn, C);
  }
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C,
                         float eps) override {
    ECO_CPU_OP("layernorm_forward");
    cpu::layernorm_forward(p(out), p(mean), p(rstd), p(inp), p(w), p(b), N, C, eps);
  }
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                          const Tensor& dout, const Tensor& inp, const Tensor& w,
                          const Tensor& mean, const Tensor& rstd, int N, int C) override {
    ECO_CPU_OP("layernorm_backward");
    cpu::layernorm_backward(p(dinp), p(dw), p(db), p(dout), p(inp), p(w), p(mean), p(rstd), N, C);
  }
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       int N, int C, float eps) override {
    ECO_CPU_OP("rmsnorm_forward");
    cpu::rmsnorm_forward(p(out), p(rstd), p(inp), p(w), N, C, eps);
  }
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp,
                        const Tensor& w, const Tensor& rstd, int N, int C) override {
    ECO_CPU_OP("rmsnorm_backward");
    cpu::rmsnorm_backward(p(dinp), p(dw), p(dout), p(inp), p(w), p(rstd), N, C);
  }
  void gelu_forward(const Tensor& out, const Tensor& inp, int64_t n) override {
    ECO_CPU_OP("gelu_forward");
    cpu::gelu_forward(p(out), p(inp), n);
  }
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                     int64_t n) override {
    ECO_CPU_OP("gelu_backward");
    cpu::gelu_backward(p(dinp), p(inp), p(dout), n);
  }
  void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int H) override {
    ECO_CPU_OP("swiglu_forward");
    cpu::swiglu_forward(p(out), p(inp), N, H);
  }
  void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                       int H) override {
    ECO_CPU_OP("swiglu_backward");
    cpu::swiglu_backward(p(dinp), p(dout), p(inp), N, H);
  }
  void attention_forward(const Tensor& out, const Tensor& att_state, const Tensor& qkv, int B,
                         int Tn, const AttentionShape& a) override {
    ECO_CPU_OP("attention_forward");
    cpu::attention_forward_gqa(p(out), p(att_state), p(qkv), B, Tn, a.NH, a.KVH, a.hd, a.window,
                               a.q_scalar);
  }
  // The probabilities in att_state are all backward needs; out is not read.
  void attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                          const Tensor& qkv, const Tensor& /*out*/, const Tensor& att_state,
                          int B, int Tn, const AttentionShape& a) override {
    ECO_CPU_OP("attention_backward");
    cpu::attention_backward_gqa(p(dqkv), p(scratch), p(dout), p(qkv), p(att_state), B, Tn, a.NH,
                                a.KVH, a.hd, a.window, a.q_scalar);
  }
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int Tn, const AttentionShape& a,
                    float theta) override {
    ECO_CPU_OP("rope_forward");
    cpu::rope_forward_gqa(p(out), p(inp), B, Tn, a.NH, a.KVH, a.hd, theta);
  }
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int Tn,
                     const AttentionShape& a, float theta) override {
    ECO_CPU_OP("rope_backward");
    cpu::rope_backward_gqa(p(dinp), p(dout), B, Tn, a.NH, a.KVH, a.hd, theta);
  }
  void qk_rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                          const Tensor& wq, const Tensor& wk, int N, int NH, int KVH, int hd,
                          float eps) override {
    ECO_CPU_OP("qk_rmsnorm_forward");
    cpu::qk_rmsnorm_forward(p(out), p(rstd), p(inp), p(wq), p(wk), N, NH, KVH, hd, eps);
  }
  void qk_rmsnorm_backward(const Tensor& dinp, const Tensor& dwq, const Tensor& dwk,
                           const Tensor& dout, const Tensor& inp, const Tensor& wq,
                           const Tensor& wk, const Tensor& rstd, int N, int NH, int KVH,
                           int hd) override {
    ECO_CPU_OP("qk_rmsnorm_backward");
    cpu::qk_rmsnorm_backward(p(dinp), p(dwq), p(dwk), p(dout), p(inp), p(wq), p(wk), p(rstd), N,
                             NH, KVH, hd);
  }
  void geglu_forward(const Tensor& out, const Tensor& inp, int N, int H) override {
    ECO_CPU_OP("geglu_forward");
    cpu::geglu_forward(p(out), p(inp), N, H);
  }
  void geglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                      int H) override {
    ECO_CPU_OP("geglu_backward");
    cpu::geglu_backward(p(dinp), p(dout), p(inp), N, H);
  }
  void scale_inplace(const Tensor& x, float s, int64_t n) override {
    ECO_CPU_OP("scale_inplace");
    cpu::scale_inplace(p(x), s, n);
  }
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b, int64_t n) override {
    ECO_CPU_OP("residual_forward");
    cpu::residual_forward(p(out), p(a), p(b), n);
  }
  void crossentropy_forward_backward(const Tensor& losses, const Tensor& dlogits,
                                     const Tensor& logits, const Tensor& targets, int N, int V,
                                     int ld, float dloss) override {
    ECO_CPU_OP("crossentropy_forward_backward");
    ECO_ASSERT(ld == V, "cpu: logits stride {} != vocabulary {} (the CPU never pads)", ld, V);
    cpu::crossentropy_forward_backward(p(losses), p(dlogits), p(logits), targets.as<int32_t>(), N,
                                       V, dloss);
  }

  void moe_route(const Tensor& idx, const Tensor& gates, const Tensor& probs, const Tensor& lse,
                 const Tensor& logits, const Tensor& select_bias, int N, int E, int k,
                 MoeRouter mode, bool norm_topk) override {
    ECO_CPU_OP("moe_route");
    cpu::moe_route(idx.as<int32_t>(), p(gates), p(probs), p(lse), p(logits), p(select_bias), N,
                   E, k, mode, norm_topk);
  }
  MoeRouterSums moe_router_sums(const Tensor& probs, const Tensor& lse, int N, int E) override {
    ECO_CPU_OP("moe_router_sums");
    return cpu::moe_router_sums(p(probs), p(lse), N, E);
  }
  MoeDispatch moe_dispatch(const Tensor& row_of_slot, const Tensor& token_of_row,
                           const Tensor& idx, const Tensor& gates, int N, int E, int k,
                           int64_t capacity) override {
    ECO_CPU_OP("moe_dispatch");
    return cpu::moe_dispatch(row_of_slot.as<int32_t>(), token_of_row.as<int32_t>(),
                             idx.as<int32_t>(), p(gates), N, E, k, capacity, moe_row_align());
  }
  void moe_gather(const Tensor& rows, const Tensor& x, const Tensor& token_of_row, int64_t R,
                  int C) override {
    ECO_CPU_OP("moe_gather");
    cpu::moe_gather(p(rows), p(x), token_of_row.as<int32_t>(), R, C);
  }
  void moe_combine(const Tensor& out, const Tensor& y, const Tensor& gates,
                   const Tensor& row_of_slot, int N, int C, int k, bool accumulate) override {
    ECO_CPU_OP("moe_combine");
    cpu::moe_combine(p(out), p(y), p(gates), row_of_slot.as<int32_t>(), N, C, k, accumulate);
  }
  void moe_combine_backward(const Tensor& dy, const Tensor& dgates, const Tensor& dout,
                            const Tensor& y, const Tensor& gates, const Tensor& row_of_slot,
                            int N, int C, int k) override {
    ECO_CPU_OP("moe_combine_backward");
    cpu::moe_combine_backward(p(dy), p(dgates), p(dout), p(y), p(gates),
                              row_of_slot.as<int32_t>(), N, C, k);
  }
  void moe_scatter_add(const Tensor& dx, const Tensor& drows, const Tensor& row_of_slot, int N,
                       int C, int k) override {
    ECO_CPU_OP("moe_scatter_add");
    cpu::moe_scatter_add(p(dx), p(drows), row_of_slot.as<int32_t>(), N, C, k);
  }
  void moe_router_backward(const Tensor& dlogits, const Tensor& dgates, const Tensor& idx,
                           const Tensor& gates, const Tensor& probs, const Tensor& logits,
                           const Tensor& lse, const std::vector<double>& aux_w, double z_coef,
                           int N, int E, int k, MoeRouter mode, bool norm_topk) override {
    ECO_CPU_OP("moe_router_backward");
    cpu::moe_router_backward(p(dlogits), p(dgates), idx.as<int32_t>(), p(gates), p(probs),
                             p(logits), p(lse), aux_w, z_coef, N, E, k, mode, norm_topk);
  }

  void dequantize(const Tensor& out, const QTensor& q) override {
    ECO_CPU_OP("dequantize");
    ECO_ASSERT(out.dtype == DType::F32, "dequantize writes fp32, not {}", dtype_name(out.dtype));
    ::eco::dequantize(q, out.as<float>());
  }
  void quantize(QTensor& q, const Tensor& src, Rounding rounding, uint64_t seed, uint64_t step,
                uint32_t tensor_id) override {
    ECO_CPU_OP("quantize");
    ECO_ASSERT(src.dtype == DType::F32, "quantize reads fp32, not {}", dtype_name(src.dtype));
    // A NaN or an infinity has no code (the reference quantizer would encode it, as the CUDA
    // kernels do): refused before q is touched.
    if (const NonFinite bad = find_non_finite(src.as<float>(), q.numel()))
      data_error("quantize: element {} (row {}, column {}) of a ({}, {}) weight is {} ({} "
                 "non-finite in all): a non-finite value has no {} code",
                 bad.first, bad.first / q.cols, bad.first % q.cols, q.rows, q.cols, bad.value,
                 bad.count, qformat_name(q.format));
    ::eco::quantize(src.as<float>(), q, rounding, seed, step, tensor_id);
  }
  void round_to_bf16(const Tensor& out, const Tensor& in, int64_t n) override {
    ECO_CPU_OP("round_to_bf16");
    float* o = out.as<float>();
    const float* x = in.as<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_float(float_to_bf16(x[i]));
  }
  void cast_activations(const Tensor& out, const Tensor& x, int N, int C,
                        ActCast cast) override {
    ECO_CPU_OP("cast_activations");
    const int64_t n = int64_t(N) * C;
    if (cast == ActCast::None) {
      if (out.data != x.data) std::memcpy(out.data, x.data, size_t(n) * sizeof(T));
      return;
    }
    if (cast == ActCast::Bf16) {
      round_to_bf16(out, x, n);
      return;
    }
    ECO_ASSERT(cast == ActCast::E4M3Row && x.dtype == DType::F32,
               "cast_activations {} of {}", int(cast), dtype_name(x.dtype));
    cpu::cast_rows_e4m3(out.as<float>(), x.as<float>(), N, C);
  }

  void sum_squares_segments(const Tensor& x, const std::vector<SumSegment>& segs,
                            double* out) override {
    ECO_CPU_OP("sum_squares_segments");
    check_sum_segments(x, segs);
    cpu::sum_squares_segments(out, p(x), segs.data(), int64_t(segs.size()));
  }

  // Each tensor's elements in parallel (the plain step is element-wise: any order, the same
  // bits), in the backend's precision T (plain_update.h: fp32 on the vector lanes).
  void plain_update(const std::vector<PlainUpdate>& ts, const RuleStep& step) override {
    ECO_CPU_OP("plain_update");
    for (const PlainUpdate& t : ts)
      with_rule<T>(with_weight_decay(step, t.weight_decay), [&](const auto& rule) {
        using Rule = std::decay_t<decltype(rule)>;
        // The direction stage: Elementwise rules read m as it is (optimizer_rules.h's Direction
        // says what a matrix direction runs here first).
        static_assert(Rule::kDirection == Direction::Elementwise);
        T* w = p(t.param);
        const T* g = p(t.grad);
        T* m = p(t.m);
        T* v = Rule::kHasV ? p(t.v) : nullptr;
        ECO_ASSERT(!Rule::kHasV || v, "plain update of {} elements without v", t.n);
        plain_update_tensor(rule, w, g, m, v, t.n);
      });
  }

  void quantized_update(QTensor& q, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const Tensor& v, const RuleStep& step, const QuantizedStep& qs,
                        const RowRange& rows) override {
    ECO_CPU_OP("quantized_update");
    with_rule(step, [&](const auto& rule) {
      using Rule = std::decay_t<decltype(rule)>;
      static_assert(Rule::kDirection == Direction::Elementwise);  // as in plain_update
      const Tensor rule_v = Rule::kHasV ? v : Tensor{};
      with_buffers(q, master, grad, m, rule_v, [&](const auto& b) {
        quantized_update_matrix(rule, quantizer(q, qs), qs.policy, b, q.scales.as<float>(),
                                q.rows, q.cols, q.granularity, rows);
      });
    });
  }

 private:
  static FormatQuantizer quantizer(const QTensor& q, const QuantizedStep& qs) {
    return FormatQuantizer{q.format, qs.rounding, qs.seed, qs.step, qs.tensor_id};
  }

  // The update's buffers for the optimizer state dtype (fp32 or bf16 bits), handed to `run`.
  template <class Run>
  void with_buffers(QTensor& q, const Tensor& master, const Tensor& grad, const Tensor& m,
                    const Tensor& v, Run run) {
    ECO_ASSERT(grad.dtype == DType::F32, "quantized update needs fp32 gradients");
    auto buffers = [&](auto* mm, auto* vv) {
      using S = std::remove_pointer_t<decltype(mm)>;
      run(QuantizedUpdateBuffers<S, float>{q.codes.as<uint8_t>(),
                                           master.empty() ? nullptr : master.as<float>(),
                                           grad.as<float>(), mm, vv});
    };
    if (m.dtype == DType::BF16)
      buffers(m.as<uint16_t>(), v.empty() ? nullptr : v.as<uint16_t>());
    else
      buffers(m.as<float>(), v.empty() ? nullptr : v.as<float>());
  }

  T* p(const Tensor& t) const {
    if (t.empty()) return nullptr;
    ECO_ASSERT(t.dtype == dtype(), "tensor dtype {} on the {} backend", dtype_name(t.dtype),
               name());
    return t.as<T>();
  }

  std::vector<std::unique_ptr<void, AlignedFree>> buffers_;
  HostOpTimer timer_;
};

}  // namespace eco
