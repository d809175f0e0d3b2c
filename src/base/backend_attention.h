// The backend's attention family (one of the interfaces Backend joins, src/base/backend.h): causal
// self-attention, RoPE and QK-norm, each taking the call's AttentionShape (src/base/math/
// attention_shape.h: grouped-query, sliding window, query scale; plain multi-head attention is
// AttentionShape::multi_head, KVH == NH).
#pragma once
#include <cstdint>
#include <vector>

#include "base/math/attention_shape.h"
#include "base/tensor.h"

namespace eco {

struct BackendAttention {
  virtual ~BackendAttention() = default;
  // Shape of the state attention_forward saves for attention_backward (the parameter dtype),
  // which is also the shape of attention_backward's scratch: the CPU keeps the softmax
  // probabilities (B, NH, T, T); CUDA keeps the log-sum-exp of each query's scores (B, NH, T).
  virtual std::vector<int64_t> attention_state_shape(int B, int NH, int T) const {
    return {B, NH, T, T};
  }
  // qkv (B*T, a.qkv_width()) -> out (B*T, a.out_width()); att_state (attention_state_shape(B,
  // a.NH, T)) saved for backward.
  virtual void attention_forward(const Tensor& out, const Tensor& att_state, const Tensor& qkv,
                                 int B, int T, const AttentionShape& a) = 0;
  // dqkv += gradient, from that forward's qkv, out (unchanged since) and att_state; scratch has
  // attention_state_shape too.
  virtual void attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                                  const Tensor& qkv, const Tensor& out, const Tensor& att_state,
                                  int B, int T, const AttentionShape& a) = 0;
  // RoPE over the a.NH q heads and a.KVH k heads of qkv rows (B*T, a.qkv_width()), each a.hd
  // wide; v passes (the window and query scale play no part). The backward accumulates dinp.
  virtual void rope_forward(const Tensor& out, const Tensor& inp, int B, int T,
                            const AttentionShape& a, float theta) = 0;
  virtual void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T,
                             const AttentionShape& a, float theta) = 0;
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
};

}  // namespace eco
