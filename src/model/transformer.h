// The transformer language model (GPT-2 and Llama block families), written once against the
// Backend interface. It owns its parameters, gradients and activations (allocated up front for
// the largest batch it will see), and exposes forward/backward as whole-batch calls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/backend.h"
#include "model/param_store.h"
#include "model/param_table.h"

namespace eco {

class Transformer {
 public:
  // Allocates everything for batches of up to max_batch sequences of up to cfg.seq_len tokens.
  // The treatment decides how parameters are stored (see ParamStore); fp32 by default.
  Transformer(const ModelConfig& cfg, Backend& backend, int max_batch,
              const Treatment& treatment = Treatment{});

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return be_; }
  ParamStore& store() { return store_; }
  // All gradients as one flat tensor (backend dtype), laid out in table order (spec.offset).
  const Tensor& grads() const { return grads_; }
  Tensor grad(size_t i) const;

  // GPT-2 initialisation: normal(0, spec.init_std), deterministic for a seed.
  void init_weights(uint64_t seed) { store_.init(seed); }
  void zero_grad();

  // Forward + backward on one micro-batch: returns the mean loss over B*T targets and
  // accumulates gradients of (loss * loss_scale) into grads(). Tokens are host arrays (B, T).
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float loss_scale);
  // Forward only: the mean loss (evaluation).
  double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward only: logits on the backend, valid until the next call. The buffer holds
  // (max_batch * seq_len, logits_stride()) rows; the first B*T rows are this batch, token n's
  // vocabulary at [n * logits_stride(), n * logits_stride() + V).
  const Tensor& forward_logits(const int32_t* inputs, int B, int T);
  // Row stride of the logits (Backend::logits_stride: V, or V padded for the CUDA GEMMs).
  int64_t logits_stride() const { return logits_ld_; }
  // The largest shapes the model runs, as given to Backend::reserve_workspaces.
  const WorkspaceShapes& workspace_shapes() const { return shapes_; }

 private:
  // Indices into the parameter table of one block's parameters (-1: absent in this family).
  struct LayerParams {
    int norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b, fc_w, fc_b,
        mlp_proj_w, mlp_proj_b;
  };
  struct LayerActs {
    Tensor norm1, norm1_mean, norm1_rstd;  // (N, C), (N), (N)
    Tensor qkv;                            // (N, 3C) projection output
    Tensor qkv_rope;                       // (N, 3C) after RoPE (llama only)
    Tensor att;                            // attention_state_shape: saved for backward
    Tensor atty;                           // (N, C) attention output
    Tensor proj_in;                        // (N, C) atty as the proj linear sees it (cast)
    Tensor resid_mid;                      // (N, C) x + attn
    Tensor norm2, norm2_mean, norm2_rstd;  // (N, C), (N), (N)
    Tensor fc;                             // (N, H) gpt2 / (N, 2H) llama
    Tensor act;                            // (N, H)
    Tensor resid_out;                      // (N, C) resid_mid + mlp
  };

  void upload_tokens(const Tensor& dst, const int32_t* src, int B, int T);
  void forward(int B, int T);   // from tokens_ to logits_
  double loss(int B, int T, float dloss_per_row, bool with_grad);
  void backward(int B, int T);  // from dlogits (in logits_) to grads_
  void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                    const Tensor& w, const Tensor& b, int N);
  // resid = a + b, then out = the family's norm of resid (Backend::residual_norm_forward).
  void residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                             const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                             const Tensor& bias, int N);
  void norm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                     const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     int N);
  int index(const std::string& name) const;  // -1 when absent
  Tensor w(int i) { return i < 0 ? Tensor{} : store_.compute(size_t(i)); }  // compute view
  Tensor g(int i) const { return i < 0 ? Tensor{} : grad(size_t(i)); }
  // out = cast(inp) @ w^T + b, the input cast as the treatment's forward does for quantized
  // linears; the cast input is written to cast_inp (inp itself: cast in place), which is what the
  // linear's backward must see.
  void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& cast_inp, int w_idx,
                      int b_idx, int N, int C, int OC);
  // dinp += dout @ W, and the linear's weight and bias gradients, on the weight the forward used
  // (quantized: its dequantized codes) and cast_inp, the input as that forward cast it.
  void linear_backward(const Tensor& dinp, const Tensor& dout, const Tensor& cast_inp, int w_idx,
                       int b_idx, int N, int C, int OC);

  ModelConfig cfg_;
  Backend& be_;
  ParamTable table_;
  ParamStore store_;
  int max_batch_;
  std::vector<LayerParams> layers_;
  int wte_, wpe_, norm_f_w_, norm_f_b_, head_;
  Tensor grads_;
  Tensor tokens_, targets_, losses_;
  Tensor encoded_;             // (N, C) embedding output
  std::vector<LayerActs> acts_;
  // Names of the per-layer profiler / NVTX ranges, built once.
  std::vector<std::string> forward_range_, backward_range_;
  Tensor norm_f_, norm_f_mean_, norm_f_rstd_;
  Tensor logits_;              // (N, logits_ld_); holds dlogits after the loss with gradient
  WorkspaceShapes shapes_;
  int logits_ld_ = 0;          // row stride of logits_: V, or V padded (Backend::logits_stride)
  // backward scratch, shared by all layers (act_dtype; d_att_scratch_ in dtype)
  Tensor d_resid_, d_norm_, d_qkv_, d_qkv_rope_, d_atty_, d_fc_, d_act_, d_att_scratch_,
      scratch_c_;
};

}  // namespace eco
