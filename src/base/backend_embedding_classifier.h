// The backend's embedding-and-classifier family (one of the interfaces Backend joins,
// src/base/backend.h): the token (and learned position) embedding, the language-model head and
// the cross-entropy loss over its logits.
#pragma once
#include "base/tensor.h"

namespace eco {

struct BackendEmbeddingClassifier {
  virtual ~BackendEmbeddingClassifier() = default;
  // out (B*T, C) = wte[tokens[b, t]] + wpe[t] (wpe may be empty: no learned positions); the
  // backward accumulates dwte and dwpe.
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int B, int T, int C) = 0;
  // Row stride of the logits (>= V): the model allocates them (N, logits_stride(V, C)), and
  // head_forward, head_backward and crossentropy_forward_backward read and write rows at that
  // stride. CUDA pads a vocabulary that is not a multiple of 8 (GPT-2's 50257) to a multiple of
  // 64 so that every row starts 16-byte aligned, as the tensor-core GEMMs want; the CPU uses V.
  virtual int logits_stride(int V, int /*C*/) const { return V; }
  // The language-model head (no bias): logits (N, ld) with ld = logits_stride(V, C), its first
  // V columns inp (N, C) @ w (V, C)^T and the columns past V zero. Backend's default is
  // matmul_forward (ld == V only).
  virtual void head_forward(const Tensor& logits, const Tensor& inp, const Tensor& w, int N,
                            int C, int V, int ld) = 0;
  // Its backward from dlogits (N, ld), whose columns past V are zero (as
  // crossentropy_forward_backward leaves them): dinp (N, C) += dlogits @ w, dw (V, C) +=
  // dlogits^T @ inp. Backend's default is matmul_backward (ld == V only).
  virtual void head_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dlogits,
                             const Tensor& inp, const Tensor& w, int N, int C, int V, int ld) = 0;
  // losses (N) and, if dlogits is non-empty, dlogits (N, ld) (may alias logits) from logits
  // (N, ld), each row's first V columns being the vocabulary; dlogits' columns past V are
  // written zero.
  virtual void crossentropy_forward_backward(const Tensor& losses, const Tensor& dlogits,
                                             const Tensor& logits, const Tensor& targets, int N,
                                             int V, int ld, float dloss) = 0;
};

}  // namespace eco
