// The MLP half of a transformer block as an interface: the block hands it its normed input
// (norm2's output) and adds what it returns to the residual. Dense today (model/dense_mlp.h:
// GELU or SwiGLU); issue 7's sparse Mixture-of-Experts (router -> token dispatch -> grouped
// experts -> combine) is a second implementation of this interface, chosen per layer in
// make_mlp, with its parameters under ParamRole::Router and ParamRole::Expert.
#pragma once
#include <memory>
#include <string>

#include "model/model_context.h"

namespace eco {

class Mlp {
 public:
  virtual ~Mlp() = default;
  // out (N, C) = mlp(normed (N, C)); normed stays unchanged until backward (it is saved).
  virtual void forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed,
                       int N) = 0;
  // d_normed (N, C) = dL/d normed (written, not accumulated) from d_out = dL/d out (N, C);
  // the MLP's parameter gradients accumulate. s: the shared temporaries (d_normed is s.d_norm).
  virtual void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                        const Tensor& d_out, const Tensor& normed, int N) = 0;
};

// The MLP of layer `layer` (parameters named prefix + "mlp.*"), for N = B*T rows: the dense MLP
// of the config's kind (a MoE config will choose the MoE MLP here).
std::unique_ptr<Mlp> make_mlp(const ModelContext& ctx, const std::string& prefix, int layer,
                              int64_t N);

}  // namespace eco
