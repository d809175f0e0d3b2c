// The backend interface: the model is written once against these operations; kernels/cpu
// implements them as the fp32/fp64 reference, kernels/cuda as the product. Shapes follow
// kernels/cpu/kernels.h (row-major, N = B*T rows; every backward accumulates with +=).
// A backend owns every buffer it allocates and records it in the memory ledger.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/memory_ledger.h"
#include "base/tensor.h"
#include "base/qtensor.h"
#include "base/treatment.h"
#include "base/math/attention_shape.h"
#include "base/math/bf16.h"
#include "base/math/eco_update.h"
#include "base/math/moe_router.h"
#include "base/math/moe_stats.h"
#include "base/math/optimizer_rules.h"
#include "base/math/sum_segment.h"

namespace eco {

// The largest shapes a model runs, reported once by the Transformer (Backend::reserve_workspaces).
struct WorkspaceShapes {
  int64_t tokens = 0;             // B * T rows of activations
  int seq_len = 0, d_model = 0, n_head = 0, vocab = 0;
  int head_dim = 0;               // the attention's head size; 0: d_model / n_head
  // Whether some layer runs plain multi-head attention (AttentionShape::plain: the paths with a
  // score workspace take only those); the others run grouped-query / windowed attention.
  bool plain_attention = true;
  int64_t widest_linear_in = 0;   // the largest C of a block linear's input (d_model or mlp hidden)
  int64_t widest_linear_out = 0;  // the largest OC of a block linear (3 d_model or the mlp's fc)
  int64_t largest_weight = 0;     // elements of the largest weight any GEMM reads (the head's)
  bool fp8_activations = false;   // the forward casts block-linear inputs to E4M3 per row
  // Width of the attention's output rows, n_head x head size (the C of plain attention).
  int attention_width() const { return n_head * (head_dim > 0 ? head_dim : d_model / n_head); }
};

// AttentionShape (src/base/math/attention_shape.h): the shape of a grouped-query, optionally
// sliding-window causal attention with a query scale.

// One tensor of a plain (unquantized) update: param, grad, m (and v where the rule has one) of
// n elements. cols: the parameter's row length (a 1-D parameter: its length), so that a rule
// whose direction stage works on the 2-D parameter sees n / cols whole rows of it.
struct PlainUpdate {
  Tensor param, grad, m, v;
  int64_t n = 0;
  float weight_decay = 0.0f;
  int64_t cols = 0;
};

// How a quantized parameter is updated this step (the treatment's policy and rounding), and
// the key of its SR random stream.
struct QuantizedStep {
  UpdatePolicy policy;
  Rounding rounding;
  uint64_t seed, step;
  uint32_t tensor_id;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether tensors live in host memory (a collective can then work on them in place; device
  // memory goes through copies or a device communicator).
  virtual bool host_memory() const { return false; }
  // dtype of parameters, parameter gradients, plain optimizer state, the saved statistics of
  // norms and attention (mean, rstd, attention state) and the per-token losses.
  virtual DType dtype() const = 0;
  // dtype of activations, their gradients (backward scratch) and logits: dtype() on the CPU
  // reference, bf16 on CUDA.
  virtual DType act_dtype() const { return dtype(); }
  // Shape of the state attention_forward saves for attention_backward (dtype()), which is also
  // the shape of attention_backward's scratch: the CPU keeps the softmax probabilities
  // (B, NH, T, T); CUDA keeps the log-sum-exp of each query's scores (B, NH, T).
  virtual std::vector<int64_t> attention_state_shape(int B, int NH, int T) const {
    return {B, NH, T, T};
  }
  // Called once by the model with its largest shapes: a backend that keeps workspaces for them
  // (CUDA: attention scores, padded logits, bf16 weight copies, FP8 activation codes) allocates
  // them now, so the ledger (and --plan) has them from the start and they never grow mid-run.
  virtual void reserve_workspaces(const WorkspaceShapes& /*shapes*/) {}
  // What a plan cannot put in the ledger (the planning backend of --plan: memory that depends on
  // the device found at run time), one line each; empty for a backend that runs.
  virtual std::vector<std::string> plan_notes() const { return {}; }
  // Whether matmul_forward / matmul_backward round their weight operand to bf16 (RNE) themselves
  // (CUDA: the GEMMs are bf16). Then a bf16-weight treatment's compute view can be the fp32
  // master itself: RNE is idempotent, so the GEMM sees the same bits without a rounding pass.
  virtual bool gemm_rounds_weights_to_bf16() const { return false; }
  // Row stride of the logits (>= V): the model allocates them (N, logits_stride(V, C)), and
  // head_forward, head_backward and crossentropy_forward_backward read and write rows at that
  // stride. CUDA pads a vocabulary that is not a multiple of 8 (GPT-2's 50257) to a multiple of
  // 64 so that every row starts 16-byte aligned, as the tensor-core GEMMs want; the CPU uses V.
  virtual int logits_stride(int V, int /*C*/) const { return V; }
  // Wait for all queued work (timing). Operations that return host values synchronise anyway.
  virtual void synchronize() {}
  // A second stream of device work beside the one every operation runs on (the compute stream):
  // parallel.overlap's gradient sums run there on a GPU (NCCL, DeviceCommunicator::Lane::Side)
  // while the compute stream goes on with the backward. The two are ordered only by these calls:
  // side_fork: the side stream's next work waits for everything enqueued on the compute stream
  // so far; side_join: the compute stream's next work waits for everything enqueued on the side
  // stream so far (then synchronize() waits for both). Host backends have none: they run
  // everything in call order, and both calls do nothing.
  virtual bool has_side_stream() const { return false; }
  virtual void side_fork() {}
  virtual void side_join() {}

  // ---- profiling ------------------------------------------------------------------------------
  // A named range around a piece of work (a layer's forward, the optimizer step, data loading):
  // NVTX ranges on CUDA, shown by Nsight Systems; nothing on the CPU. Use ScopedRange.
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}
  // Per-operation timing for the ms/step breakdown. While enabled, every backend operation is
  // timed on the device and summed by operation name; take_profile() returns the totals since
  // enabling or since the last take (largest first) and resets them. Backends without it return
  // nothing.
  struct OpTime {
    std::string name;
    int64_t calls;
    double ms;
  };
  virtual bool supports_profiling() const { return false; }
  virtual void set_profiling(bool /*on*/) {}
  virtual std::vector<OpTime> take_profile() { return {}; }

  // ---- memory -------------------------------------------------------------------------------
  // Allocate a zero-filled tensor that lives as long as the backend; recorded in the ledger
  // (quantizable_param: it belongs to a block linear, for the per-quantized-parameter figures).
  virtual Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
                       MemCategory category, bool quantizable_param = false) = 0;
  virtual void zero(const Tensor& t) = 0;
  // acc (n) = acc + x, element by element in the parameter dtype (the trainer's gradient
  // accumulation: one rounding per addition, in the order the caller adds).
  virtual void add_inplace(const Tensor& acc, const Tensor& x, int64_t n) = 0;
  // Raw copies in the tensor's own dtype.
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }

  // ---- layers (see kernels/cpu/kernels.h for the exact contracts) -------------------------
  virtual void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                              const Tensor& bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                               int C, int OC) = 0;
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int B, int T, int C) = 0;
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& w, const Tensor& b, int N,
                                 int C, float eps) = 0;
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                  const Tensor& dout, const Tensor& inp, const Tensor& w,
                                  const Tensor& mean, const Tensor& rstd, int N, int C) = 0;
  virtual void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                               const Tensor& w, int N, int C, float eps) = 0;
  virtual void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                int C) = 0;
  virtual void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int C, int NH,
                            float theta) = 0;
  virtual void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int C, int NH,
                             float theta) = 0;
  // qkv (B*T, 3C) -> out (B*T, C); att_state (attention_state_shape) saved for backward.
  virtual void attention_forward(const Tensor& out, const Tensor& att_state, const Tensor& qkv,
                                 int B, int T, int C, int NH) = 0;
  // dqkv += gradient, from that forward's qkv, out (unchanged since) and att_state; scratch has
  // attention_state_shape too.
  virtual void attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                                  const Tensor& qkv, const Tensor& out, const Tensor& att_state,
                                  int B, int T, int C, int NH) = 0;
  // The general attention (AttentionShape: GQA, sliding window, query scale): qkv (B*T,
  // qkv_width) -> out (B*T, out_width); att_state has attention_state_shape(B, NH, T) (the
  // multi-head operations above are the plain() case).
  virtual void attention_forward_gqa(const Tensor& out, const Tensor& att_state, const Tensor& qkv,
                                     int B, int T, const AttentionShape& a) = 0;
  virtual void attention_backward_gqa(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                                      const Tensor& qkv, const Tensor& out,
                                      const Tensor& att_state, int B, int T,
                                      const AttentionShape& a) = 0;
  // RoPE over the NH q heads and KVH k heads of qkv rows (B*T, (NH + 2 KVH) hd); v passes
  // (rope_forward / rope_backward are the case KVH == NH).
  virtual void rope_forward_gqa(const Tensor& out, const Tensor& inp, int B, int T, int NH,
                                int KVH, int hd, float theta) = 0;
  virtual void rope_backward_gqa(const Tensor& dinp, const Tensor& dout, int B, int T, int NH,
                                 int KVH, int hd, float theta) = 0;
  // QK-norm: RMSNorm over each hd-wide q head (gain wq (hd)) and k head (gain wk (hd)) of qkv
  // rows (N, (NH + 2 KVH) hd) into out (same shape; v copied); rstd (N, NH + KVH). Its backward
  // accumulates dinp (v's gradient passes), dwq and dwk.
  virtual void qk_rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                                  const Tensor& wq, const Tensor& wk, int N, int NH, int KVH,
                                  int hd, float eps) = 0;
  virtual void qk_rmsnorm_backward(const Tensor& dinp, const Tensor& dwq, const Tensor& dwk,
                                   const Tensor& dout, const Tensor& inp, const Tensor& wq,
                                   const Tensor& wk, const Tensor& rstd, int N, int NH, int KVH,
                                   int hd) = 0;
  virtual void gelu_forward(const Tensor& out, const Tensor& inp, int64_t n) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                             int64_t n) = 0;
  virtual void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int H) = 0;
  virtual void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                               int H) = 0;
  // GeGLU: inp (N, 2H) = [gate | up] -> out (N, H) = gelu_tanh(gate) * up; backward as
  // swiglu_backward.
  virtual void geglu_forward(const Tensor& out, const Tensor& inp, int N, int H) = 0;
  virtual void geglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                              int H) = 0;
  // x (n) *= s: Gemma's embedding scale sqrt(d_model) on the activations, and its backward.
  virtual void scale_inplace(const Tensor& x, float s, int64_t n) = 0;
  // out (n) = a + b: activations (the residual stream), or dtype() operands (the (1 + w) gains of
  // Gemma's norms, model_context.cpp's norm_gain).
  virtual void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b,
                                int64_t n) = 0;
  // The residual add and the norm after it: resid (N, C) = a + b as residual_forward, then out
  // = norm(resid) as layernorm_forward (rms false; mean saved, bias may be empty) or
  // rmsnorm_forward (rms true; mean and bias unused). The default makes the two calls; CUDA
  // fuses them (one pass less over resid, the same bits).
  virtual void residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& a, const Tensor& b,
                                     const Tensor& w, const Tensor& bias, int N, int C, float eps,
                                     bool rms);
  // The language-model head (no bias): logits (N, ld) with ld = logits_stride(V, C), its first
  // V columns inp (N, C) @ w (V, C)^T and the columns past V zero. The default is
  // matmul_forward (ld == V only).
  virtual void head_forward(const Tensor& logits, const Tensor& inp, const Tensor& w, int N,
                            int C, int V, int ld);
  // Its backward from dlogits (N, ld), whose columns past V are zero (as
  // crossentropy_forward_backward leaves them): dinp (N, C) += dlogits @ w, dw (V, C) +=
  // dlogits^T @ inp. The default is matmul_backward (ld == V only).
  virtual void head_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dlogits,
                             const Tensor& inp, const Tensor& w, int N, int C, int V, int ld);
  // losses (N) and, if dlogits is non-empty, dlogits (N, ld) (may alias logits) from logits
  // (N, ld), each row's first V columns being the vocabulary; dlogits' columns past V are
  // written zero.
  virtual void crossentropy_forward_backward(const Tensor& losses, const Tensor& dlogits,
                                             const Tensor& logits, const Tensor& targets, int N,
                                             int V, int ld, float dloss) = 0;

  // ---- mixture of experts (kernels/cpu/moe.h has the exact contracts and the layout) --------
  // N tokens, E experts, k per token; a token's slots s = t * k + j; the dispatch sorts them by
  // expert into R rows (row_of_slot (N * k), token_of_row (R), int32; -1: dropped slot).
  // The router's logits (N, E) in the parameter dtype (fp32, not the activations' dtype) =
  // x (N, C) @ w (E, C)^T, and their backward: dx (N, C) += dlogits @ w, dw += dlogits^T @ x.
  // The defaults are matmul_forward / matmul_backward (one dtype for both).
  virtual void router_matmul_forward(const Tensor& logits, const Tensor& x, const Tensor& w,
                                     int N, int C, int E);
  virtual void router_matmul_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlogits,
                                      const Tensor& x, const Tensor& w, int N, int C, int E);
  // idx (N, k) i32, gates (N, k), probs (N, E) = softmax, lse (N) from logits (N, E);
  // select_bias (E) for MoeRouter::SigmoidBias, else empty.
  virtual void moe_route(const Tensor& idx, const Tensor& gates, const Tensor& probs,
                         const Tensor& lse, const Tensor& logits, const Tensor& select_bias,
                         int N, int E, int k, MoeRouter mode, bool norm_topk) = 0;
  // The router's sums over the N tokens, on the host (aux loss, z-loss, entropy).
  virtual MoeRouterSums moe_router_sums(const Tensor& probs, const Tensor& lse, int N,
                                        int E) = 0;
  // The row alignment of the dispatch's expert segments (MoeDispatch): 1 unless the backend's
  // expert GEMMs want whole tiles. Row buffers hold moe_max_rows(N k, E, moe_row_align()) rows.
  virtual int moe_row_align() const { return 1; }
  // The counting sort of the slots by expert, stable in slot order, each expert keeping at most
  // `capacity` slots (its highest gates), segments aligned to moe_row_align() rows (padding rows
  // get token -1); returns the histogram and offsets on the host (they size the expert GEMMs:
  // one copy to the host per layer and forward).
  virtual MoeDispatch moe_dispatch(const Tensor& row_of_slot, const Tensor& token_of_row,
                                   const Tensor& idx, const Tensor& gates, int N, int E, int k,
                                   int64_t capacity) = 0;
  // rows (R, C) = x[token_of_row], zero rows where it is -1 (padding).
  virtual void moe_gather(const Tensor& rows, const Tensor& x, const Tensor& token_of_row,
                          int64_t R, int C) = 0;
  // out (N, C) (= or +=) the gate-weighted sum of each token's k rows of y, in fixed k order.
  virtual void moe_combine(const Tensor& out, const Tensor& y, const Tensor& gates,
                           const Tensor& row_of_slot, int N, int C, int k, bool accumulate) = 0;
  // dy (R, C) and dgates (N, k) from dout (N, C) (both written; dy's padding rows are not
  // touched).
  virtual void moe_combine_backward(const Tensor& dy, const Tensor& dgates, const Tensor& dout,
                                    const Tensor& y, const Tensor& gates,
                                    const Tensor& row_of_slot, int N, int C, int k) = 0;
  // dx (N, C) += the sum of each token's k rows of drows (R, C), in fixed k order.
  virtual void moe_scatter_add(const Tensor& dx, const Tensor& drows, const Tensor& row_of_slot,
                               int N, int C, int k) = 0;
  // dlogits (N, E) += the router backward from dgates (N, k), the aux loss's per-expert
  // weights aux_w (E; empty: no aux loss) and the z-loss coefficient (src/base/math/
  // moe_router.h, moe_router_backward_token).
  virtual void moe_router_backward(const Tensor& dlogits, const Tensor& dgates,
                                   const Tensor& idx, const Tensor& gates, const Tensor& probs,
                                   const Tensor& logits, const Tensor& lse,
                                   const std::vector<double>& aux_w, double z_coef, int N, int E,
                                   int k, MoeRouter mode, bool norm_topk) = 0;

  // ---- quantization ---------------------------------------------------------------------------
  // out (rows, cols) fp32 = dequant(q).
  virtual void dequantize(const Tensor& out, const QTensor& q) = 0;
  // q = quantize(src (rows, cols) fp32) with q's format and granularity; SR draws are keyed by
  // (seed, step, tensor_id, element index).
  virtual void quantize(QTensor& q, const Tensor& src, Rounding rounding, uint64_t seed,
                        uint64_t step, uint32_t tensor_id) = 0;
  // out (n) = bf16-rounded in (round to nearest even), kept in fp32.
  virtual void round_to_bf16(const Tensor& out, const Tensor& in, int64_t n) = 0;
  // What the forward does to activations x (N, C) entering a quantized linear, written to out
  // (N, C), which may alias x: None: a copy; Bf16: round; E4M3Row: quantize-dequantize with one
  // scale per row, RTN.
  virtual void cast_activations(const Tensor& out, const Tensor& x, int N, int C,
                                ActCast cast) = 0;

  // ---- linear layers whose weight is held quantized (ParamStore::LinearWeight) --------------
  // Forward of x (N, C) through w (OC, C), a QTensor:
  //   x_cast (N, C) = cast_activations(x, act); may alias x; what the backward must see as input
  //   out (N, OC)   = x_cast @ dequant(w)^T + bias (OC; may be empty)
  // w_scratch (OC, C) fp32 is a buffer the implementation may overwrite (the dequantized weight).
  // The default is the emulation every backend can run: cast_activations, dequantize into
  // w_scratch, matmul_forward. A backend may override it with a GEMM on the codes that computes
  // the same products (CUDA on sm_90+: FP8 E4M3 x E4M3 with row-wise scales); out then differs
  // from the emulation by the GEMM's summation order and output rounding only.
  virtual void quantized_linear_forward(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                                        const QTensor& w, const Tensor& w_scratch,
                                        const Tensor& bias, int N, int C, int OC, ActCast act);
  // Its backward, as matmul_backward on the dequantized weight with x_cast as the input:
  // dinp (N, C) += dout (N, OC) @ dequant(w), dw (OC, C) += dout^T @ x_cast, dbias += column sums
  // of dout. The default dequantizes into w_scratch and calls matmul_backward; an override may
  // decode the codes straight into the GEMM's operand type (CUDA: bf16), with the same values.
  virtual void quantized_linear_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                         const Tensor& dout, const Tensor& x_cast,
                                         const QTensor& w, const Tensor& w_scratch, int N, int C,
                                         int OC);

  // ---- optimizer ----------------------------------------------------------------------------
  virtual double sum_squares(const Tensor& x, int64_t n) = 0;
  // out[k] = the sum over i in [segs[k].offset, segs[k].offset + segs[k].length) of
  // double(x[i])^2, for every k (SumSegment: src/base/math/sum_segment.h, elements of x viewed
  // flat). Each segment's sum is computed in an order fixed by its length alone: the same segment
  // asked alone, among others, with any thread count or launch gives the same bits (the caller
  // adds the partials in a fixed order: optim's sharding-independent gradient norm). x: F32 (F64
  // on the CPU gradient-check backend); out: host memory, segs.size() doubles. Empty segs:
  // nothing. A segment outside x is an error naming it (check_sum_segments).
  virtual void sum_squares_segments(const Tensor& x, const std::vector<SumSegment>& segs,
                                    double* out) = 0;
  // The two updates take the rule as data: a RuleStep (src/base/math/optimizer_rules.h: which
  // rule, its hyperparameters and the step's terms), built once per step by the optimizer, which
  // every backend hands unchanged to the rule's element math (with_rule), so that a rule added
  // there runs on every backend with the same bits and no change here.
  // The plain steps of the unquantized tensors ts (param, grad, m, and v where the rule has one,
  // in the backend's dtype), each with its own weight decay (step.weight_decay is replaced by
  // it). CUDA runs them all in one launch.
  virtual void plain_update(const std::vector<PlainUpdate>& ts, const RuleStep& step) = 0;
  // The fused update of a quantized parameter (src/base/math/eco_update.h), one scale group at
  // a time: moments, theta (never stored), new scale, codes, and under ECO the error into m.
  // master is the fp32 master copy (Master policy) or empty; m, v (v where the rule has one) are
  // fp32 or bf16; all of them hold the whole tensor. `rows`: the rows to update (all by default)
  // and the global index of their first element, which keys the SR draws (RowRange): updating
  // the ranges of a partition one by one gives the whole-tensor bits. Block128 ranges start and
  // end on block-row boundaries; a PerTensor tensor takes only all rows.
  virtual void quantized_update(QTensor& q, const Tensor& master, const Tensor& grad,
                                const Tensor& m, const Tensor& v, const RuleStep& step,
                                const QuantizedStep& qs, const RowRange& rows = {}) = 0;

 protected:
  MemoryLedger ledger_;
};

// A range for the scope's lifetime (Backend::range_push / range_pop).
class ScopedRange {
 public:
  ScopedRange(Backend& be, const char* name) : be_(be) { be_.range_push(name); }
  ~ScopedRange() { be_.range_pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  Backend& be_;
};

// Raises an error naming the first segment of segs that is not inside x's numel() elements
// (a negative offset or length, or one past the end); the backends call it before summing.
void check_sum_segments(const Tensor& x, const std::vector<SumSegment>& segs);

// The CPU reference backend in fp32 (training) or fp64 (gradient checks).
std::unique_ptr<Backend> make_cpu_backend(DType dtype = DType::F32);
// A backend that only records allocations in its ledger (for --plan); no operation may run.
// device "cuda" plans with the CUDA backend's layouts (bf16 activations, lse attention state).
std::unique_ptr<Backend> make_planning_backend(Device device = Device::Cpu);
// The CUDA backend (kernels/cuda/cuda_backend.cpp) on the current device. A usage error when
// this build has no CUDA backend or no CUDA GPU is visible.
std::unique_ptr<Backend> make_cuda_backend();
// Free memory of the current CUDA device in bytes; 0 when unknown (no CUDA backend in this build,
// no GPU visible). The memory check of a cuda run (train/memory_check.h) compares the plan with it.
uint64_t cuda_free_memory_bytes();
// CUDA GPUs visible to this process; 0 without a CUDA backend in this build or without a GPU.
int cuda_device_count();
// The backend for a config's `device` (cpu: fp32 reference; cuda: make_cuda_backend).
std::unique_ptr<Backend> make_backend(Device device);

// A F32, F64 or BF16 tensor copied to the host as floats (logits for sampling, tests).
inline std::vector<float> to_host_floats(Backend& be, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::F32) {
    be.copy_to_host(out.data(), t);
  } else if (t.dtype == DType::BF16) {
    std::vector<uint16_t> bits(out.size());
    be.copy_to_host(bits.data(), t);
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
  } else if (t.dtype == DType::F64) {
    std::vector<double> d(out.size());
    be.copy_to_host(d.data(), t);
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(d[i]);
  } else {
    throw std::invalid_argument(std::string("to_host_floats: unsupported dtype ") +
                                dtype_name(t.dtype));
  }
  return out;
}

}  // namespace eco
