// The dense MLP (model/mlp.h): fc linear -> GELU | SwiGLU -> proj linear, forward and backward.
// SwiGLU's fc holds the gate rows [0, H) and the up rows [H, 2H) (ModelConfig::fc_rows).
#pragma once
#include <string>

#include "model/linear.h"
#include "model/mlp.h"

namespace eco {

class DenseMlp : public Mlp {
 public:
  DenseMlp(const ModelContext& ctx, const std::string& prefix, int layer, int64_t N);
  void forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) override;
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                const Tensor& d_out, const Tensor& normed, int N) override;

 private:
  LinearRef fc_, proj_;
  Tensor fc_out_;  // (N, H) gelu / (N, 2H) swiglu
  Tensor act_;     // (N, H)
};

}  // namespace eco
