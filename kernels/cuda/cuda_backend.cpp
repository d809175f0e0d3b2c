// The CUDA Backend: bf16 activations (and their gradients, and logits), fp32 parameters,
// gradients, optimizer state and saved statistics; every operation is one or a few launches of
// the kernels in kernels/cuda on one stream, the GEMMs through one GemmEngine (cuBLASLt).
// Host code, compiled by the host compiler (so it may use fmt through base/error.h).
//
// Dense weights reach the GEMMs as the fp32 tensors ParamStore's compute view gives (the
// parameter or its bf16-rounded master) and are converted to bf16 into a scratch before each
// GEMM; the GEMMs run bf16 x bf16 with fp32 accumulation and fp32 weight gradients. Weights held
// quantized arrive as QTensors (quantized_linear_forward / _backward): the forward of E4M3
// per-row weights runs the FP8 GEMM on their codes (GemmEngine::matmul_forward_fp8, sm_89+; see
// quantized_linear_forward for when it falls back to the emulation the CPU runs), and the
// backward GEMMs run bf16 on the codes decoded straight to bf16.
//
// Also make_nccl_communicator (dist/device_communicator.h): the NCCL communicator on this
// backend's stream (nccl_communicator.cpp), in builds with NCCL.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "dist/device_communicator.h"
#include "kernels/cuda/cuda_attention.h"
#include "base/math/format_quantizer.h"
#include "base/math/moe_dispatch.h"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_gemm.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/classifier.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/norms.cuh"
#include "kernels/cuda/op_profiler.h"
#include "kernels/cuda/multi_tensor_update.cuh"
#include "kernels/cuda/optimizer_update.cuh"
#include "kernels/cuda/quantize.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/workspace_plan.h"
#include "base/backend.h"
#ifdef ECO_HAVE_NCCL
#include "kernels/cuda/nccl_communicator.h"
#endif

namespace eco {
namespace {

// Opens the operation's profiler scope (an NVTX range; CUDA-event timing when profiling is on).
#define ECO_OP(name) const cuda::OpProfiler::Scope eco_op_scope_(prof_, name, compute_stream())

using bf16 = __nv_bfloat16;
using cuda::DeviceBuffer;

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
using Stream = std::unique_ptr<CUstream_st, StreamDeleter>;

Stream make_stream() {
  cudaStream_t s = nullptr;
  // A blocking stream: it also orders against anything that runs on the legacy default stream.
  ECO_CHECK_CUDA(cudaStreamCreate(&s));
  return Stream(s);
}

struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

Event make_event() {
  cudaEvent_t e = nullptr;
  ECO_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));  // ordering only
  return Event(e);
}

// A device scratch that grows to the largest request and records its growth in the ledger.
class GrowingScratch {
 public:
  GrowingScratch(std::string name, size_t elem_bytes) : name_(std::move(name)), elem_(elem_bytes) {}
  // At least n elements; waits for the stream's queued work before replacing a smaller buffer.
  template <class T>
  T* get(size_t n, cudaStream_t s, MemoryLedger& ledger) {
    const size_t bytes = std::max<size_t>(n, 1) * elem_;
    if (bytes > buf_.bytes()) {
      ECO_CHECK_CUDA(cudaStreamSynchronize(s));
      const size_t old = buf_.bytes();
      buf_ = DeviceBuffer();
      buf_ = DeviceBuffer(bytes);
      ledger.record(name_ + (old ? " (growth)" : ""), MemCategory::Workspace, bytes - old);
    }
    return buf_.get<T>();
  }

 private:
  std::string name_;
  size_t elem_;
  DeviceBuffer buf_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend()
      : stream_(make_stream()),
        side_(make_stream()),
        fork_(make_event()),
        join_(make_event()),
        attention_request_(parse_cuda_attention(std::getenv("ECO_CUDA_ATTENTION"))) {
    ledger_.record(cuda_ws::kCublasLtWorkspaceName, MemCategory::Workspace,
                   cuda::GemmEngine::kWorkspaceBytes);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(side_.get());
    cudaStreamSynchronize(stream_.get());
  }

  std::string name() const override { return "cuda"; }
  DType dtype() const override { return DType::F32; }
  DType act_dtype() const override { return cuda_ws::kActivationDType; }
  // weight_bf16 converts every fp32 weight with RNE before the GEMMs.
  bool gemm_rounds_weights_to_bf16() const override { return true; }
  void reserve_workspaces(const WorkspaceShapes& shapes) override {
    const cuda_ws::Reservation r = cuda_ws::reservation(shapes);
    // The GEMM path's score scratch, unless the mma path takes the model's attention shapes.
    if (r.attention_scores &&
        cuda_ws::reserves_attention_scores(
            attention_request_,
            cuda::attention_mma_supported(1, shapes.seq_len, shapes.attention_width(),
                                          shapes.n_head, {})))
      attention_scores(r.attention_scores);
    if (r.weight_bf16)
      weight_bf16_.get<bf16>(r.weight_bf16 / sizeof(bf16), compute_stream(), ledger_);
    if (r.fp8_activations) fp8_act_.get<uint8_t>(r.fp8_activations, compute_stream(), ledger_);
    if (shapes.fp8_activations && gemm_.compute_capability() < 89)
      spdlog::warn(
          "FP8 GEMMs need compute capability 8.9+ (this GPU is sm_{}): the FP8 treatment's "
          "forward GEMMs run emulated in bf16 on the dequantized codes (the same quantization, "
          "without FP8's speed)",
          gemm_.compute_capability());
    // sm_89's row-scaled FP8 route keeps its fp32 sums in the engine (GemmEngine).
    if (r.fp8_accumulator_sm89 && gemm_.compute_capability() >= 89 &&
        gemm_.rowwise_fp8_epilogue())
      ledger_.record("FP8 GEMM fp32 accumulator (sm_89)", MemCategory::Workspace,
                     gemm_.reserve_fp8_accumulator(r.fp8_accumulator_sm89 / sizeof(float)));
  }
  int logits_stride(int V, int C) const override { return cuda_ws::logits_stride(V, C); }
  std::vector<int64_t> attention_state_shape(int B, int NH, int Tn) const override {
    return cuda_ws::attention_state_shape(B, NH, Tn);
  }
  void synchronize() override { ECO_CHECK_CUDA(cudaStreamSynchronize(compute_stream())); }
  // The stream every operation runs on (make_nccl_communicator enqueues its collectives there).
  cudaStream_t compute_stream() const { return stream_.get(); }
  // The side stream (parallel.overlap's NCCL gradient sums), ordered against the compute stream
  // by an event each way; an event is reused: a wait takes its latest record.
  cudaStream_t side_stream() const { return side_.get(); }
  bool has_side_stream() const override { return true; }
  void side_fork() override {
    ECO_CHECK_CUDA(cudaEventRecord(fork_.get(), compute_stream()));
    ECO_CHECK_CUDA(cudaStreamWaitEvent(side_.get(), fork_.get(), 0));
  }
  void side_join() override {
    ECO_CHECK_CUDA(cudaEventRecord(join_.get(), side_.get()));
    ECO_CHECK_CUDA(cudaStreamWaitEvent(compute_stream(), join_.get(), 0));
  }

  // ---- profiling ------------------------------------------------------------------------------
  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }
  bool supports_profiling() const override { return true; }
  void set_profiling(bool on) override { prof_.set_enabled(on); }
  std::vector<OpTime> take_profile() override {
    std::vector<OpTime> out;
    for (auto& [name, t] : prof_.take()) out.push_back({name, t.calls, t.ms});
    return out;
  }

  // ---- memory -------------------------------------------------------------------------------
  Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
               MemCategory category, bool quantizable_param) override {
    Tensor t;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.data = alloc_raw(name, t.bytes());
    ledger_.record(name, category, t.bytes(), quantizable_param);
    return t;
  }
  void zero(const Tensor& t) override {
    ECO_OP("zero");
    ECO_CHECK_CUDA(cudaMemsetAsync(t.data, 0, t.bytes(), compute_stream()));
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    ECO_OP("copy_from_host");
    ECO_CHECK_CUDA(
        cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, compute_stream()));
    synchronize();
  }
  void add_inplace(const Tensor& acc, const Tensor& x, int64_t n) override {
    ECO_OP("add_inplace");
    ECO_ASSERT(acc.numel() >= n && x.numel() >= n, "add_inplace of {} elements into {} / {}", n,
               acc.numel(), x.numel());
    ECO_CHECK_CUDA(cuda::add_inplace_f32(f32(acc), f32(x), n, compute_stream()));
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    ECO_OP("copy_to_host");
    ECO_CHECK_CUDA(
        cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, compute_stream()));
    synchronize();
  }

  // ---- layers ---------------------------------------------------------------------------------
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias,
                      int N, int C, int OC) override {
    ECO_OP("matmul_forward");
    gemm_.matmul_forward(bf(out), bf(inp), weight_bf16(w, int64_t(OC) * C), f32(bias), N, C, OC,
                         compute_stream());
  }
  // dinp accumulates (beta = 1), as the interface's every backward does.
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& w, int N, int C,
                       int OC) override {
    ECO_OP("matmul_backward");
    const bf16* wb = dinp.empty() ? nullptr : weight_bf16(w, int64_t(OC) * C);
    gemm_.matmul_backward(bf(dinp), f32(dw), f32(dbias), bf(dout), bf(inp), wb, N, C, OC,
                          /*accumulate_dinp=*/true, compute_stream());
  }
  // The head. A vocabulary that is not a multiple of 8 (GPT-2's 50257) would start every row of
  // the logits (forward) and of dlogits (backward) off a 16-byte boundary, and cuBLASLt then picks
  // slow narrow-access kernels for the largest GEMMs of the model. So the model keeps logits rows
  // ld = logits_stride(V, C) (a multiple of 64) apart, and the GEMMs run over all ld columns
  // with a bf16 weight whose rows past V are zero: logits' extra columns come out zero, and
  // dlogits' (zero, as the classifier writes them) add nothing to dinp.
  void head_forward(const Tensor& logits, const Tensor& inp, const Tensor& w, int N, int C, int V,
                    int ld) override {
    if (ld == V) {
      matmul_forward(logits, inp, w, Tensor{}, N, C, V);
      return;
    }
    ECO_OP("head_forward");
    check_head(logits, N, C, V, ld);
    gemm_.gemm<bf16, bf16>(false, true, N, ld, C, 1.0f, bf(inp), C, weight_bf16_padded(w, V, ld, C),
                           C, 0.0f, bf(logits), ld, compute_stream());
  }
  void head_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dlogits,
                     const Tensor& inp, const Tensor& w, int N, int C, int V, int ld) override {
    if (ld == V) {
      matmul_backward(dinp, dw, Tensor{}, dlogits, inp, w, N, C, V);
      return;
    }
    ECO_OP("head_backward");
    check_head(dlogits, N, C, V, ld);
    // dinp (N, C) += dlogits (N, ld) @ W_p (ld, C); dW (V, C) += (first V columns)^T @ inp.
    if (!dinp.empty())
      gemm_.gemm<bf16, bf16>(false, false, N, C, ld, 1.0f, bf(dlogits), ld,
                             weight_bf16_padded(w, V, ld, C), C, 1.0f, bf(dinp), C,
                             compute_stream());
    gemm_.gemm<bf16, float>(true, false, V, C, N, 1.0f, bf(dlogits), ld, bf(inp), C, 1.0f, f32(dw),
                            C, compute_stream());
  }
  void check_head(const Tensor& logits, int N, int C, int V, int ld) const {
    ECO_ASSERT(ld == logits_stride(V, C),
               "head with logits stride {} where the backend pads {} to {}", ld, V,
               logits_stride(V, C));
    ECO_ASSERT(logits.numel() >= int64_t(N) * ld, "logits of {} elements for ({}, {})",
               logits.numel(), N, ld);
  }
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe, int B, int Tn, int C) override {
    ECO_OP("embedding_forward");
    ECO_CHECK_CUDA(cuda::embedding_forward(bf(out), i32(tokens), f32(wte), f32(wpe), B, Tn, C,
                                           compute_stream()));
  }
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int B, int Tn, int C) override {
    ECO_OP("embedding_backward");
    ECO_CHECK_CUDA(cuda::embedding_backward(f32(dwte), f32(dwpe), bf(dout), i32(tokens), B, Tn, C,
                                            compute_stream()));
  }
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C,
                         float eps) override {
    ECO_OP("layernorm_forward");
    ECO_CHECK_CUDA(cuda::layernorm_forward(bf(out), f32(mean), f32(rstd), bf(inp), f32(w), f32(b),
                                           N, C, eps, compute_stream()));
  }
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                          const Tensor& dout, const Tensor& inp, const Tensor& w,
                          const Tensor& mean, const Tensor& rstd, int N, int C) override {
    ECO_OP("layernorm_backward");
    float* scratch = scratch_f32(cuda::norm_backward_scratch_floats(C));
    ECO_CHECK_CUDA(cuda::layernorm_backward(bf(dinp), f32(dw), f32(db), bf(dout), bf(inp), f32(w),
                                            f32(mean), f32(rstd), N, C, scratch, compute_stream()));
  }
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w,
                       int N, int C, float eps) override {
    ECO_OP("rmsnorm_forward");
    ECO_CHECK_CUDA(
        cuda::rmsnorm_forward(bf(out), f32(rstd), bf(inp), f32(w), N, C, eps, compute_stream()));
  }
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp,
                        const Tensor& w, const Tensor& rstd, int N, int C) override {
    ECO_OP("rmsnorm_backward");
    float* scratch = scratch_f32(cuda::norm_backward_scratch_floats(C));
    ECO_CHECK_CUDA(cuda::rmsnorm_backward(bf(dinp), f32(dw), bf(dout), bf(inp), f32(w), f32(rstd),
                                          N, C, scratch, compute_stream()));
  }
  // att_state: the log-sum-exp (B, NH, T) fp32; the probabilities are never stored; scratch
  // (B, NH, T) fp32 holds D = rowsum(dout * out) on every path. Every path saves the same lse,
  // so a forward and a backward may take different paths. A plain() shape takes the multi-head
  // paths (multi_head_attention_forward: mma, the cuBLASLt GEMMs, the flash kernel); any other
  // (grouped-query, sliding-window or query-scaled: gemma3) runs the flash kernel
  // (attention.cuh: head sizes up to 256) unless ECO_CUDA_ATTENTION=mma and the mma path takes
  // it (attention_mma.cuh: head sizes 32, 64, 128, 256, 16-byte aligned buffers).
  void attention_forward(const Tensor& out, const Tensor& att_state, const Tensor& qkv, int B,
                         int Tn, const AttentionShape& a) override {
    ECO_OP("attention_forward");
    if (a.plain()) {
      multi_head_attention_forward(out, att_state, qkv, B, Tn, a.NH * a.hd, a.NH);
      return;
    }
    check_attention_shape(a);
    if (gqa_attention_path(B, Tn, a, {bf(out), bf(qkv)}) == CudaAttention::Mma) {
      cuda::attention_mma_forward_gqa(bf(out), f32(att_state), bf(qkv), B, Tn, a, compute_stream());
      return;
    }
    ECO_CHECK_CUDA(
        cuda::attention_forward_gqa(bf(out), f32(att_state), bf(qkv), B, Tn, a, compute_stream()));
  }
  void attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                          const Tensor& qkv, const Tensor& out, const Tensor& att_state, int B,
                          int Tn, const AttentionShape& a) override {
    ECO_OP("attention_backward");
    if (a.plain()) {
      multi_head_attention_backward(dqkv, scratch, dout, qkv, out, att_state, B, Tn, a.NH * a.hd,
                                    a.NH);
      return;
    }
    check_attention_shape(a);
    if (gqa_attention_path(B, Tn, a, {bf(dqkv), bf(dout), bf(qkv), bf(out)}) ==
        CudaAttention::Mma) {
      cuda::attention_mma_backward_gqa(bf(dqkv), f32(scratch), bf(dout), bf(qkv), bf(out),
                                       f32(att_state), B, Tn, a, compute_stream());
      return;
    }
    ECO_CHECK_CUDA(cuda::attention_backward_gqa(bf(dqkv), f32(scratch), bf(dout), bf(qkv), bf(out),
                                                f32(att_state), B, Tn, a, compute_stream()));
  }
  void rope_forward(const Tensor& out, const Tensor& inp, int B, int Tn, const AttentionShape& a,
                    float theta) override {
    ECO_OP("rope_forward");
    ECO_CHECK_CUDA(cuda::rope_forward_gqa(bf(out), bf(inp), B, Tn, a.NH, a.KVH, a.hd, theta,
                                          compute_stream()));
  }
  void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int Tn,
                     const AttentionShape& a, float theta) override {
    ECO_OP("rope_backward");
    ECO_CHECK_CUDA(cuda::rope_backward_gqa(bf(dinp), bf(dout), B, Tn, a.NH, a.KVH, a.hd, theta,
                                           compute_stream()));
  }
  void qk_rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                          const Tensor& wq, const Tensor& wk, int N, int NH, int KVH, int hd,
                          float eps) override {
    ECO_OP("qk_rmsnorm_forward");
    ECO_CHECK_CUDA(cuda::qk_rmsnorm_forward(bf(out), f32(rstd), bf(inp), f32(wq), f32(wk), N, NH,
                                            KVH, hd, eps, compute_stream()));
  }
  void qk_rmsnorm_backward(const Tensor& dinp, const Tensor& dwq, const Tensor& dwk,
                           const Tensor& dout, const Tensor& inp, const Tensor& wq,
                           const Tensor& wk, const Tensor& rstd, int N, int NH, int KVH,
                           int hd) override {
    ECO_OP("qk_rmsnorm_backward");
    float* scratch = scratch_f32(cuda::qk_norm_backward_scratch_floats(hd));
    ECO_CHECK_CUDA(cuda::qk_rmsnorm_backward(bf(dinp), f32(dwq), f32(dwk), bf(dout), bf(inp),
                                             f32(wq), f32(wk), f32(rstd), N, NH, KVH, hd, scratch,
                                             compute_stream()));
  }
  void gelu_forward(const Tensor& out, const Tensor& inp, int64_t n) override {
    ECO_OP("gelu_forward");
    ECO_CHECK_CUDA(cuda::gelu_forward(bf(out), bf(inp), n, compute_stream()));
  }
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                     int64_t n) override {
    ECO_OP("gelu_backward");
    ECO_CHECK_CUDA(cuda::gelu_backward(bf(dinp), bf(inp), bf(dout), n, compute_stream()));
  }
  void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int H) override {
    ECO_OP("swiglu_forward");
    ECO_CHECK_CUDA(cuda::swiglu_forward(bf(out), bf(inp), N, H, compute_stream()));
  }
  void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                       int H) override {
    ECO_OP("swiglu_backward");
    ECO_CHECK_CUDA(cuda::swiglu_backward(bf(dinp), bf(dout), bf(inp), N, H, compute_stream()));
  }
  void geglu_forward(const Tensor& out, const Tensor& inp, int N, int H) override {
    ECO_OP("geglu_forward");
    ECO_CHECK_CUDA(cuda::geglu_forward(bf(out), bf(inp), N, H, compute_stream()));
  }
  void geglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                      int H) override {
    ECO_OP("geglu_backward");
    ECO_CHECK_CUDA(cuda::geglu_backward(bf(dinp), bf(dout), bf(inp), N, H, compute_stream()));
  }
  // Activations (bf16: Gemma's embedding scale and its backward) or fp32 buffers.
  void scale_inplace(const Tensor& x, float scale, int64_t n) override {
    ECO_OP("scale_inplace");
    if (x.dtype == DType::F32)
      ECO_CHECK_CUDA(cuda::scale_inplace(f32(x), scale, n, compute_stream()));
    else
      ECO_CHECK_CUDA(cuda::scale_inplace_bf16(bf(x), scale, n, compute_stream()));
  }
  // Activations (bf16), or fp32 parameter-dtype operands: the (1 + w) gains of Gemma's norms
  // (model_context.cpp's norm_gain) are w + ones in the parameters' dtype, as on the CPU.
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b, int64_t n) override {
    ECO_OP("residual_forward");
    if (out.dtype == DType::F32)
      ECO_CHECK_CUDA(cuda::add_f32(f32(out), f32(a), f32(b), n, compute_stream()));
    else
      ECO_CHECK_CUDA(cuda::residual_forward(bf(out), bf(a), bf(b), n, compute_stream()));
  }
  void residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                             const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                             const Tensor& bias, int N, int C, float eps, bool rms) override {
    ECO_OP("residual_norm_forward");
    if (rms)
      ECO_CHECK_CUDA(cuda::residual_rmsnorm_forward(bf(resid), bf(out), f32(rstd), bf(a), bf(b),
                                                    f32(w), N, C, eps, compute_stream()));
    else
      ECO_CHECK_CUDA(cuda::residual_layernorm_forward(bf(resid), bf(out), f32(mean), f32(rstd),
                                                      bf(a), bf(b), f32(w), f32(bias), N, C, eps,
                                                      compute_stream()));
  }
  void crossentropy_forward_backward(const Tensor& losses, const Tensor& dlogits,
                                     const Tensor& logits, const Tensor& targets, int N, int V,
                                     int ld, float dloss) override {
    ECO_OP("crossentropy_forward_backward");
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(
        f32(losses), bf(dlogits), bf(logits), i32(targets), N, V, ld, dloss, compute_stream()));
  }

  // ---- quantization ---------------------------------------------------------------------------
  // ---- mixture of experts (kernels/cuda/moe.cuh) ----------------------------------------------
  // The router's logits in fp32: a bf16 GEMM (bf16 weight copy, fp32 accumulation) with an fp32
  // output. Its backward rounds dlogits to bf16 once and runs the bf16 backward GEMMs, as every
  // other linear's backward does.
  void router_matmul_forward(const Tensor& logits, const Tensor& x, const Tensor& w, int N, int C,
                             int E) override {
    ECO_OP("router_matmul_forward");
    gemm_.gemm<bf16, float>(false, true, N, E, C, 1.0f, bf(x), C, weight_bf16(w, int64_t(E) * C), C,
                            0.0f, f32(logits), E, compute_stream());
  }
  void router_matmul_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlogits,
                              const Tensor& x, const Tensor& w, int N, int C, int E) override {
    ECO_OP("router_matmul_backward");
    bf16* d = moe_bf16_.get<bf16>(size_t(N) * size_t(E), compute_stream(), ledger_);
    ECO_CHECK_CUDA(cuda::f32_to_bf16(d, f32(dlogits), int64_t(N) * E, compute_stream()));
    const bf16* wb = dx.empty() ? nullptr : weight_bf16(w, int64_t(E) * C);
    gemm_.matmul_backward(bf(dx), f32(dw), nullptr, d, bf(x), wb, N, C, E,
                          /*accumulate_dinp=*/true, compute_stream());
  }
  int moe_row_align() const override { return cuda_ws::kMoeRowAlign; }
  void moe_route(const Tensor& idx, const Tensor& gates, const Tensor& probs, const Tensor& lse,
                 const Tensor& logits, const Tensor& select_bias, int N, int E, int k,
                 MoeRouter mode, bool norm_topk) override {
    ECO_OP("moe_route");
    ECO_CHECK_CUDA(cuda::moe_route(typed<int32_t>(idx, DType::I32), f32(gates), f32(probs),
                                   f32(lse), f32(logits), f32(select_bias), N, E, k, mode,
                                   norm_topk, compute_stream()));
  }
  MoeRouterSums moe_router_sums(const Tensor& probs, const Tensor& lse, int N, int E) override {
    ECO_OP("moe_router_sums");
    double* d = moe_f64_.get<double>(size_t(E) + 2, compute_stream(), ledger_);
    ECO_CHECK_CUDA(cuda::moe_router_sums(d, f32(probs), f32(lse), N, E, compute_stream()));
    std::vector<double> h(static_cast<size_t>(E) + 2);
    ECO_CHECK_CUDA(cudaMemcpyAsync(h.data(), d, sizeof(double) * h.size(), cudaMemcpyDeviceToHost,
                                   compute_stream()));
    synchronize();
    MoeRouterSums r;
    r.prob_sums.assign(h.begin(), h.begin() + E);
    r.lse_sq_sum = h[size_t(E)];
    r.entropy_sum = h[size_t(E) + 1];
    return r;
  }
  // Dropless (capacity >= N: no expert can get more than N slots) sorts on the GPU and brings
  // back the histogram; a capacity that drops tokens picks its slots by gate on the host (the
  // CPU reference's sort, src/base/math/moe_dispatch.h) and uploads the maps.
  MoeDispatch moe_dispatch(const Tensor& row_of_slot, const Tensor& token_of_row,
                           const Tensor& idx, const Tensor& gates, int N, int E, int k,
                           int64_t capacity) override {
    ECO_OP("moe_dispatch");
    const int align = moe_row_align();
    const int64_t S = int64_t(N) * k;
    int32_t* slot_rows = typed<int32_t>(row_of_slot, DType::I32);
    int32_t* row_tokens = typed<int32_t>(token_of_row, DType::I32);
    ECO_ASSERT(row_of_slot.numel() >= S && token_of_row.numel() >= moe_max_rows(S, E, align),
               "moe_dispatch: maps of {} / {} entries for {} slots over {} experts",
               row_of_slot.numel(), token_of_row.numel(), S, E);
    if (capacity < N) {
      const size_t n = static_cast<size_t>(S);
      std::vector<int32_t> h_idx(n), h_slot(n), h_tok(size_t(moe_max_rows(S, E, align)));
      std::vector<float> h_gates(n);
      copy_to_host(h_idx.data(), idx);
      copy_to_host(h_gates.data(), gates);
      const MoeDispatch d = moe_dispatch_host(h_slot.data(), h_tok.data(), h_idx.data(),
                                              h_gates.data(), N, E, k, capacity, align);
      ECO_CHECK_CUDA(cudaMemcpyAsync(slot_rows, h_slot.data(), sizeof(int32_t) * size_t(S),
                                     cudaMemcpyHostToDevice, compute_stream()));
      ECO_CHECK_CUDA(cudaMemcpyAsync(row_tokens, h_tok.data(), sizeof(int32_t) * size_t(d.rows),
                                     cudaMemcpyHostToDevice, compute_stream()));
      synchronize();  // the host vectors go out of scope
      return d;
    }
    const int64_t scratch_ints = cuda::moe_dispatch_scratch_ints(N, E, k);
    int32_t* scratch = moe_i32_.get<int32_t>(size_t(scratch_ints + E), compute_stream(), ledger_);
    int32_t* counts = scratch + scratch_ints;
    ECO_CHECK_CUDA(cuda::moe_dispatch(slot_rows, row_tokens, counts, scratch,
                                      typed<int32_t>(idx, DType::I32), N, E, k, align,
                                      compute_stream()));
    std::vector<int32_t> h(static_cast<size_t>(E));
    ECO_CHECK_CUDA(cudaMemcpyAsync(h.data(), counts, sizeof(int32_t) * h.size(),
                                   cudaMemcpyDeviceToHost, compute_stream()));
    synchronize();
    MoeDispatch d;
    d.routed.assign(h.begin(), h.end());
    d.counts = d.routed;
    for (int e = 0; e < E; ++e) {
      d.offsets.push_back(d.rows);
      d.rows += (d.counts[size_t(e)] + align - 1) / align * align;
      d.kept += d.counts[size_t(e)];
    }
    ECO_ASSERT(d.kept == S, "moe_dispatch: the GPU histogram holds {} of {} slots", d.kept, S);
    return d;
  }
  void moe_gather(const Tensor& rows, const Tensor& x, const Tensor& token_of_row, int64_t R,
                  int C) override {
    ECO_OP("moe_gather");
    ECO_CHECK_CUDA(cuda::moe_gather(bf(rows), bf(x), i32(token_of_row), R, C, compute_stream()));
  }
  void moe_combine(const Tensor& out, const Tensor& y, const Tensor& gates,
                   const Tensor& row_of_slot, int N, int C, int k, bool accumulate) override {
    ECO_OP("moe_combine");
    ECO_CHECK_CUDA(cuda::moe_combine(bf(out), bf(y), f32(gates), i32(row_of_slot), N, C, k,
                                     accumulate, compute_stream()));
  }
  void moe_combine_backward(const Tensor& dy, const Tensor& dgates, const Tensor& dout,
                            const Tensor& y, const Tensor& gates, const Tensor& row_of_slot,
                            int N, int C, int k) override {
    ECO_OP("moe_combine_backward");
    ECO_CHECK_CUDA(cuda::moe_combine_backward(bf(dy), f32(dgates), bf(dout), bf(y), f32(gates),
                                              i32(row_of_slot), N, C, k, compute_stream()));
  }
  void moe_scatter_add(const Tensor& dx, const Tensor& drows, const Tensor& row_of_slot, int N,
                       int C, int k) override {
    ECO_OP("moe_scatter_add");
    ECO_CHECK_CUDA(
        cuda::moe_scatter_add(bf(dx), bf(drows), i32(row_of_slot), N, C, k, compute_stream()));
  }
  void moe_router_backward(const Tensor& dlogits, const Tensor& dgates, const Tensor& idx,
                           const Tensor& gates, const Tensor& probs, const Tensor& logits,
                           const Tensor& lse, const std::vector<double>& aux_w, double z_coef,
                           int N, int E, int k, MoeRouter mode, bool norm_topk) override {
    ECO_OP("moe_router_backward");
    float* w = nullptr;
    if (!aux_w.empty()) {
      ECO_ASSERT(aux_w.size() == size_t(E), "moe_router_backward: {} aux weights for {} experts",
                 aux_w.size(), E);
      const std::vector<float> h(aux_w.begin(), aux_w.end());
      w = moe_f32_.get<float>(h.size(), compute_stream(), ledger_);
      ECO_CHECK_CUDA(cudaMemcpyAsync(w, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice,
                                     compute_stream()));
      synchronize();  // h goes out of scope
    }
    ECO_CHECK_CUDA(cuda::moe_router_backward(f32(dlogits), f32(dgates), i32(idx), f32(gates),
                                             f32(probs), f32(logits), f32(lse), w, float(z_coef),
                                             N, E, k, mode, norm_topk, compute_stream()));
  }

  void dequantize(const Tensor& out, const QTensor& q) override {
    ECO_OP("dequantize");
    ECO_ASSERT(out.numel() == q.numel(), "dequantize of a ({}, {}) QTensor into {} elements",
               q.rows, q.cols, out.numel());
    ECO_CHECK_CUDA(cuda::dequantize(f32(out), codes(q), q.scales.as<float>(), q.rows, q.cols,
                                    q.format, q.granularity, compute_stream()));
  }
  void quantize(QTensor& q, const Tensor& src, Rounding rounding, uint64_t seed, uint64_t step,
                uint32_t tensor_id) override {
    ECO_OP("quantize");
    ECO_ASSERT(src.numel() == q.numel(), "quantize of {} elements into a ({}, {}) QTensor",
               src.numel(), q.rows, q.cols);
    ECO_ASSERT(!(q.format == QFormat::INT4 && q.granularity == Granularity::PerRow && q.cols % 2),
               "INT4 with per-row scales needs an even number of columns on CUDA, not {}", q.cols);
    float* scratch =
        scratch_f32(size_t(cuda::quantize_scratch_floats(q.rows, q.cols, q.granularity)));
    ECO_CHECK_CUDA(cuda::quantize_matrix(f32(src), codes(q), q.scales.as<float>(), q.rows, q.cols,
                                         q.format, q.granularity, rounding, seed, step, tensor_id,
                                         scratch, compute_stream()));
  }
  void round_to_bf16(const Tensor& out, const Tensor& in, int64_t n) override {
    ECO_OP("round_to_bf16");
    ECO_CHECK_CUDA(cuda::round_to_bf16_f32(f32(out), f32(in), n, compute_stream()));
  }
  // Activations are bf16 already: the Bf16 cast is the identity here.
  void cast_activations(const Tensor& out, const Tensor& x, int N, int C, ActCast cast) override {
    ECO_OP("cast_activations");
    if (cast == ActCast::E4M3Row) {
      ECO_CHECK_CUDA(cuda::cast_e4m3_rows(bf(out), bf(x), N, C, compute_stream()));
    } else if (out.data != x.data) {
      ECO_CHECK_CUDA(cudaMemcpyAsync(bf(out), bf(x), sizeof(bf16) * size_t(N) * size_t(C),
                                     cudaMemcpyDeviceToDevice, compute_stream()));
    }
  }

  // ---- linear layers with quantized weights ---------------------------------------------------
  // The FP8 forward: one kernel quantizes x per token row (E4M3, RTN; the CPU quantizer's codes)
  // into the fp8_act_ scratch and writes x_cast (what cast_activations writes), then the FP8 GEMM
  // multiplies those codes by the weight's: E4M3 x E4M3 with row-wise scales (cuBLASLt
  // OUTER_VEC_32F on sm_90+; on sm_89 a unit-scaled GEMM into an fp32 accumulator, then the
  // scales), fp32 accumulation with fast accumulation, bf16 out, bias rounded to bf16.
  // Where fp8_forward_applies says no, the emulation of the Backend base runs instead: cast,
  // dequantize into w_scratch, bf16 GEMM (this is the path of sm_80, INT4 weights, and shapes
  // that are not multiples of 16, such as a short sampling batch).
  void quantized_linear_forward(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                                const QTensor& w, const Tensor& w_scratch, const Tensor& bias,
                                int N, int C, int OC, ActCast act) override {
    ECO_OP("quantized_linear_forward");
    ECO_ASSERT(w.rows == OC && w.cols == C, "linear ({} -> {}) with a ({}, {}) quantized weight",
               C, OC, w.rows, w.cols);
    if (!fp8_forward_applies(out, x_cast, x, w, N, C, OC, act)) {
      Backend::quantized_linear_forward(out, x_cast, x, w, w_scratch, bias, N, C, OC, act);
      return;
    }
    // The scratch holds the activation codes (N, C), then, 256-byte aligned, their scales (N).
    const size_t codes_bytes = cuda_ws::round_up_256(size_t(N) * size_t(C));
    uint8_t* x_codes =
        fp8_act_.get<uint8_t>(cuda_ws::fp8_activation_bytes(N, C), compute_stream(), ledger_);
    float* x_scales = reinterpret_cast<float*>(x_codes + codes_bytes);
    ECO_CHECK_CUDA(cuda::quantize_cast_e4m3_rows(x_codes, x_scales, bf(x_cast), bf(x), N, C,
                                                 compute_stream()));
    gemm_.matmul_forward_fp8(bf(out), x_codes, x_scales, codes(w), f32(w.scales), f32(bias), N, C,
                             OC, Granularity::PerRow, compute_stream());
  }
  // The backward GEMMs stay bf16 (per-row weight scales cannot scale the reduction dimension of
  // dinp = dout @ w): the codes are decoded straight to bf16 (the values dequantize + f32_to_bf16
  // give, without the fp32 copy); w_scratch is not used.
  void quantized_linear_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                 const Tensor& dout, const Tensor& x_cast, const QTensor& w,
                                 const Tensor& /*w_scratch*/, int N, int C, int OC) override {
    ECO_OP("quantized_linear_backward");
    ECO_ASSERT(w.rows == OC && w.cols == C, "linear ({} -> {}) with a ({}, {}) quantized weight",
               C, OC, w.rows, w.cols);
    bf16* wb = weight_bf16_.get<bf16>(size_t(w.numel()), compute_stream(), ledger_);
    ECO_CHECK_CUDA(cuda::dequantize_bf16(wb, codes(w), f32(w.scales), w.rows, w.cols, w.format,
                                         w.granularity, compute_stream()));
    gemm_.matmul_backward(bf(dinp), f32(dw), f32(dbias), bf(dout), bf(x_cast), wb, N, C, OC,
                          /*accumulate_dinp=*/true, compute_stream());
  }

  // ---- optimizer ----------------------------------------------------------------------------
  // The segment table goes up and the partials come back through two scratches that grow to the
  // largest list asked (the same list every step: they grow once); a synchronisation, as above.
  void sum_squares_segments(const Tensor& x, const std::vector<SumSegment>& segs,
                            double* out) override {
    ECO_OP("sum_squares_segments");
    check_sum_segments(x, segs);
    if (segs.empty()) return;
    const size_t n = segs.size();
    SumSegment* d_segs = segment_table_.get<SumSegment>(n, compute_stream(), ledger_);
    double* d_out = segment_sums_.get<double>(n, compute_stream(), ledger_);
    ECO_CHECK_CUDA(cudaMemcpyAsync(d_segs, segs.data(), n * sizeof(SumSegment),
                                   cudaMemcpyHostToDevice, compute_stream()));
    ECO_CHECK_CUDA(cuda::sum_squares_segments(d_out, f32(x), d_segs, int64_t(n), compute_stream()));
    ECO_CHECK_CUDA(
        cudaMemcpyAsync(out, d_out, n * sizeof(double), cudaMemcpyDeviceToHost, compute_stream()));
    synchronize();
  }
  // All unquantized tensors in one launch (kernels/cuda/multi_tensor_update.cuh); the tables are
  // uploaded on the first step and reused while the list stays the same.
  void plain_update(const std::vector<PlainUpdate>& ts, const RuleStep& step) override {
    ECO_OP("plain_update");
    with_rule(step, [&](const auto& rule) {
      using Rule = std::decay_t<decltype(rule)>;
      // The direction stage: Elementwise rules read m as it is (optimizer_rules.h's Direction
      // says what a matrix direction runs here first).
      static_assert(Rule::kDirection == Direction::Elementwise);
      plain_plan_.build(slices(ts, Rule::kHasV), Rule::kHasV, compute_stream());
      ECO_CHECK_CUDA(cuda::fp32_plain_update_many(plain_plan_, step, compute_stream()));
    });
  }
  void quantized_update(QTensor& q, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const Tensor& v, const RuleStep& step, const QuantizedStep& qs,
                        const RowRange& rows) override {
    ECO_OP("quantized_update");
    check_range(q, rows);
    with_rule(step, [&](const auto& rule) {
      using Rule = std::decay_t<decltype(rule)>;
      static_assert(Rule::kDirection == Direction::Elementwise);  // as in plain_update
      const Tensor rule_v = Rule::kHasV ? v : Tensor{};
      with_update_buffers(q, master, grad, m, rule_v, qs, [&](const auto& b, float* scratch) {
        return cuda::quantized_update(step, quantizer(q, qs), qs.policy, b, q.scales.as<float>(),
                                      q.rows, q.cols, q.granularity, scratch, compute_stream(),
                                      cuda::GroupKernel::Auto, rows);
      });
    });
  }

 private:
  // with_v: the rule has a second moment (each tensor's v is passed on; else no v).
  std::vector<cuda::MultiTensorSlice> slices(const std::vector<PlainUpdate>& ts,
                                             bool with_v) const {
    std::vector<cuda::MultiTensorSlice> out;
    out.reserve(ts.size());
    for (const PlainUpdate& t : ts) {
      ECO_ASSERT(t.param.numel() >= t.n && t.grad.numel() >= t.n && t.m.numel() >= t.n &&
                     (!with_v || t.v.empty() || t.v.numel() >= t.n),
                 "plain update of {} elements on smaller buffers", t.n);
      out.push_back({f32(t.param), f32(t.grad), f32(t.m),
                     !with_v || t.v.empty() ? nullptr : f32(t.v), t.n, t.weight_decay});
    }
    return out;
  }

  // Zero-filled device memory owned by the backend (not recorded: callers record it).
  void* alloc_raw(const std::string& name, size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    try {
      buffers_.emplace_back(bytes);
    } catch (const Error& e) {
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      runtime_error("allocating {} ({} bytes) on the GPU ({} MiB free of {} MiB): {}", name, bytes,
                    free_b >> 20, total_b >> 20, e.what());
    }
    void* p = buffers_.back().get();
    ECO_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, compute_stream()));
    return p;
  }

  // Typed device pointers, checking the dtype the kernels expect (null for an empty tensor).
  template <class T>
  static T* typed(const Tensor& t, DType want) {
    if (t.empty()) return nullptr;
    ECO_ASSERT(t.dtype == want, "tensor of {} where the CUDA backend expects {}",
               dtype_name(t.dtype), dtype_name(want));
    return t.as<T>();
  }
  static bf16* bf(const Tensor& t) { return typed<bf16>(t, DType::BF16); }
  static float* f32(const Tensor& t) { return typed<float>(t, DType::F32); }
  static const int32_t* i32(const Tensor& t) { return typed<int32_t>(t, DType::I32); }
  static uint8_t* codes(const QTensor& q) { return typed<uint8_t>(q.codes, DType::U8); }

  float* scratch_f32(size_t n) { return scratch_f32_.get<float>(n, compute_stream(), ledger_); }
  // Plain multi-head attention over C = NH hs: the path (kernels/cuda/cuda_attention.h) is the
  // one ECO_CUDA_ATTENTION asks for where the call's shapes and buffers allow it, else the next
  // of mma (attention_mma.cuh: hs 32, 64, 128), the cuBLASLt GEMMs (attention_gemm.cuh: hs % 8
  // == 0) and the flash kernel (attention.cuh: any shape); auto is gemm, else flash (mma runs
  // only on request: cuda_attention.h).
  void multi_head_attention_forward(const Tensor& out, const Tensor& att_state, const Tensor& qkv,
                                    int B, int Tn, int C, int NH) {
    switch (attention_path(B, Tn, C, NH, {bf(out), bf(qkv)})) {
      case CudaAttention::Mma:
        cuda::attention_mma_forward(bf(out), f32(att_state), bf(qkv), B, Tn, C, NH,
                                    compute_stream());
        return;
      case CudaAttention::Gemm: {
        const size_t bytes = cuda::attention_gemm_scratch_bytes(Tn, NH);
        cuda::attention_gemm_forward(gemm_, bf(out), f32(att_state), bf(qkv),
                                     attention_scores(bytes), bytes, B, Tn, C, NH,
                                     compute_stream());
        return;
      }
      default:
        ECO_CHECK_CUDA(cuda::attention_forward(bf(out), f32(att_state), bf(qkv), B, Tn, C, NH,
                                               compute_stream()));
    }
  }
  void multi_head_attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                                     const Tensor& qkv, const Tensor& out,
                                     const Tensor& att_state, int B, int Tn, int C, int NH) {
    switch (attention_path(B, Tn, C, NH, {bf(dqkv), bf(dout), bf(qkv), bf(out)})) {
      case CudaAttention::Mma:
        cuda::attention_mma_backward(bf(dqkv), f32(scratch), bf(dout), bf(qkv), bf(out),
                                     f32(att_state), B, Tn, C, NH, compute_stream());
        return;
      case CudaAttention::Gemm: {
        const size_t bytes = cuda::attention_gemm_scratch_bytes(Tn, NH);
        cuda::attention_gemm_backward(gemm_, bf(dqkv), f32(scratch), attention_scores(bytes),
                                      bytes, bf(dout), bf(qkv), bf(out), f32(att_state), B, Tn, C,
                                      NH, compute_stream());
        return;
      }
      default:
        ECO_CHECK_CUDA(cuda::attention_backward(bf(dqkv), f32(scratch), bf(dout), bf(qkv), bf(out),
                                                f32(att_state), B, Tn, C, NH, compute_stream()));
    }
  }
  // The attention path of a call (kernels/cuda/cuda_attention.h).
  CudaAttention attention_path(int B, int T, int C, int NH,
                               std::initializer_list<const void*> matrices) const {
    return choose_cuda_attention(attention_request_,
                                 cuda::attention_mma_supported(B, T, C, NH, matrices),
                                 cuda::attention_gemm_supported(B, T, C, NH, matrices));
  }
  // The path of a grouped-query / windowed call: mma when asked for (ECO_CUDA_ATTENTION=mma) and
  // it takes the call, else the flash kernel. (Auto stays on the flash kernel, as for plain
  // attention, until the mma path has passed its GPU tests: kernels/cuda/cuda_attention.h.)
  CudaAttention gqa_attention_path(int B, int T, const AttentionShape& a,
                                   std::initializer_list<const void*> matrices) const {
    return attention_request_ == CudaAttention::Mma &&
                   cuda::attention_mma_gqa_supported(B, T, a, matrices)
               ? CudaAttention::Mma
               : CudaAttention::Flash;
  }
  // A head size beyond every path, named (the config check refuses it first: model.head_dim).
  static void check_attention_shape(const AttentionShape& a) {
    if (a.hd > cuda::kAttentionMaxHeadSize)
      runtime_error("the CUDA attention takes head sizes up to {} (the flash kernel; the mma "
                    "path: 32, 64, 128, 256), not {}",
                    cuda::kAttentionMaxHeadSize, a.hd);
  }
  // One sequence's attention scores and probabilities for the GEMM path.
  void* attention_scores(size_t bytes) {
    return attention_scores_.get<unsigned char>(bytes, compute_stream(), ledger_);
  }

  // The bf16 copy of an fp32 weight (OC, C) with OCp - OC zero rows after it.
  const bf16* weight_bf16_padded(const Tensor& w, int OC, int OCp, int C) {
    ECO_ASSERT(w.numel() == int64_t(OC) * C, "weight of {} elements where the GEMM reads {}",
               w.numel(), int64_t(OC) * C);
    bf16* out = weight_bf16_.get<bf16>(size_t(OCp) * size_t(C), compute_stream(), ledger_);
    ECO_CHECK_CUDA(cuda::f32_to_bf16(out, f32(w), int64_t(OC) * C, compute_stream()));
    ECO_CHECK_CUDA(cudaMemsetAsync(out + int64_t(OC) * C, 0,
                                   sizeof(bf16) * size_t(OCp - OC) * size_t(C), compute_stream()));
    return out;
  }

  // The bf16 copy of an fp32 weight (n elements) for the next GEMM on the stream.
  const bf16* weight_bf16(const Tensor& w, int64_t n) {
    ECO_ASSERT(w.numel() == n, "weight of {} elements where the GEMM reads {}", w.numel(), n);
    bf16* out = weight_bf16_.get<bf16>(size_t(n), compute_stream(), ledger_);
    ECO_CHECK_CUDA(cuda::f32_to_bf16(out, f32(w), n, compute_stream()));
    return out;
  }

  // Whether quantized_linear_forward can run the FP8 GEMM (else it runs the emulation):
  //  - E4M3 weights with one scale per row, activations cast E4M3 per row: the FP8 treatments.
  //    INT4 (and per-tensor / 128x128 weight scales) have no FP8 forward here.
  //  - sm_89+ (sm_90+: OUTER_VEC_32F scales; sm_89: the unit-scaled GEMM and the scaling
  //    kernel, see GemmEngine::matmul_forward_fp8); sm_80 has no FP8.
  //  - N, C and OC multiples of 16 (cuBLASLt's FP8 dimensions; C >= 16) and out, x, x_cast and the
  //    weight codes 16-byte aligned (the GEMM's and quantize_cast_e4m3_rows' assumptions).
  bool fp8_forward_applies(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                           const QTensor& w, int N, int C, int OC, ActCast act) const {
    const auto aligned = [](const Tensor& t) {
      return reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
    };
    return act == ActCast::E4M3Row && w.format == QFormat::E4M3 &&
           w.granularity == Granularity::PerRow && gemm_.compute_capability() >= 89 &&
           N % 16 == 0 && C >= 16 && C % 16 == 0 && OC % 16 == 0 && aligned(out) && aligned(x) &&
           aligned(x_cast) && aligned(w.codes);
  }

  static FormatQuantizer quantizer(const QTensor& q, const QuantizedStep& qs) {
    return FormatQuantizer{q.format, qs.rounding, qs.seed, qs.step, qs.tensor_id};
  }

  // Builds the update's buffers for the state dtype (fp32 or bf16 bits) and runs `launch`.
  template <class Launch>
  void with_update_buffers(QTensor& q, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const Tensor& v, const QuantizedStep& qs, Launch launch) {
    ECO_ASSERT(grad.numel() == q.numel() && m.numel() == q.numel(),
               "quantized update: grad {} / m {} elements for a ({}, {}) QTensor", grad.numel(),
               m.numel(), q.rows, q.cols);
    ECO_ASSERT(qs.policy != UpdatePolicy::Master || !master.empty(),
               "Master policy without a master weight");
    float* scratch = scratch_f32(
        size_t(cuda::quantized_update_scratch_floats(q.rows, q.cols, q.format, q.granularity)));
    if (m.dtype == DType::BF16) {
      const QuantizedUpdateBuffers<uint16_t> b{codes(q), f32(master), f32(grad),
                                               typed<uint16_t>(m, DType::BF16),
                                               typed<uint16_t>(v, DType::BF16)};
      ECO_CHECK_CUDA(launch(b, scratch));
    } else {
      const QuantizedUpdateBuffers<float> b{codes(q), f32(master), f32(grad), f32(m), f32(v)};
      ECO_CHECK_CUDA(launch(b, scratch));
    }
  }

  // The same usage errors as the CPU driver's, named, before a kernel returns a bare
  // cudaErrorInvalidValue.
  static void check_range(const QTensor& q, const RowRange& rows) {
    const int64_t end = rows.end_row(q.rows);
    ECO_ASSERT(0 <= rows.begin && rows.begin <= end && end <= q.rows,
               "row range [{}, {}) of a tensor of {} rows", rows.begin, end, q.rows);
    if (q.granularity == Granularity::PerTensor) {
      ECO_ASSERT(rows.begin == 0 && end == q.rows,
                 "rows [{}, {}) of a per-tensor-scaled tensor of {} rows: its scale takes all rows",
                 rows.begin, end, q.rows);
    } else if (q.granularity == Granularity::Block128) {
      ECO_ASSERT(rows.begin % kScaleBlock == 0 && (end % kScaleBlock == 0 || end == q.rows),
                 "rows [{}, {}) of a tensor with 128x128 block scales: a range must start and end "
                 "on a block-row boundary (a multiple of {}) or at the tensor's end ({} rows)",
                 rows.begin, end, kScaleBlock, q.rows);
    }
  }

  // Declaration order is destruction order reversed: buffers go before the engine and the stream.
  Stream stream_;
  Stream side_;        // second, after stream_ (tests/emu defers streams by creation order)
  Event fork_, join_;  // side_fork's record on stream_, side_join's on side_
  cuda::OpProfiler prof_;  // its events belong to the stream's device; destroyed after buffers
  cuda::GemmEngine gemm_;
  CudaAttention attention_request_;  // ECO_CUDA_ATTENTION, read once
  std::vector<DeviceBuffer> buffers_;
  GrowingScratch segment_table_{"sum_squares_segments table", sizeof(SumSegment)};
  GrowingScratch segment_sums_{"sum_squares_segments partials", sizeof(double)};
  GrowingScratch scratch_f32_{"cuda scratch (fp32)", sizeof(float)};
  GrowingScratch weight_bf16_{cuda_ws::kWeightBf16Name, sizeof(bf16)};
  GrowingScratch fp8_act_{cuda_ws::kFp8ActivationsName, 1};
  cuda::MultiTensorPlan plain_plan_;  // device tables of the plain updates
  GrowingScratch attention_scores_{cuda_ws::kAttentionScoresName, 1};
  // The MoE layers': the router's bf16 dlogits, the sums, the dispatch's scratch and histogram,
  // the aux loss's weights.
  GrowingScratch moe_bf16_{"moe router dlogits (bf16)", sizeof(bf16)};
  GrowingScratch moe_f64_{"moe router sums", sizeof(double)};
  GrowingScratch moe_i32_{"moe dispatch scratch", sizeof(int32_t)};
  GrowingScratch moe_f32_{"moe aux weights", sizeof(float)};
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a missing driver / device
    return 0;
  }
  return count;
}

std::string cuda_device_bus_id() {
  int count = 0, dev = 0;
  char id[64] = {};
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetPCIBusId(id, int(sizeof id), dev) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a missing driver / device
    return {};
  }
  return id;
}

uint64_t cuda_free_memory_bytes() {
  int count = 0;
  size_t free_b = 0, total_b = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a missing driver / device
    return 0;
  }
  return free_b;
}

std::unique_ptr<Backend> make_cuda_backend() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error of a missing driver / device
    usage_error("device: cuda but no CUDA GPU is visible ({})",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  }
  // The ranks an MPI launcher put on this host take its GPUs in turn (local rank modulo the
  // GPUs: several ranks share one when there are more ranks than GPUs).
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* local = std::getenv(v)) {
      ECO_CHECK_CUDA(cudaSetDevice(std::atoi(local) % count));
      break;
    }
  int dev = 0;
  ECO_CHECK_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  ECO_CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  spdlog::info("CUDA device {}: {}, sm_{}{}, {} SMs, {:.0f} GiB", dev, prop.name, prop.major,
               prop.minor, prop.multiProcessorCount, double(prop.totalGlobalMem) / (1 << 30));
  return std::make_unique<CudaBackend>();
}

bool have_nccl() {
#ifdef ECO_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, Backend& be) {
#ifdef ECO_HAVE_NCCL
  auto* cuda_be = dynamic_cast<CudaBackend*>(&be);
  if (!cuda_be)
    usage_error("the NCCL communicator moves the CUDA backend's device memory, but the backend "
                "is '{}' (NCCL is for device: cuda)",
                be.name());
  return cuda::make_nccl_communicator(host, cuda_be->compute_stream(), cuda_be->ledger(),
                                      cuda::kNcclRoundElems, cuda_be->side_stream());
#else
  (void)host;
  (void)be;
  usage_error("NCCL (device-to-device collectives), but this build has no NCCL (nccl.h or "
              "libnccl not found when it was configured, or ECO_NCCL=OFF): install NCCL "
              "(libnccl-dev, or the CUDA toolkit's) and rebuild");
#endif
}

}  // namespace eco
