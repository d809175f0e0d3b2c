// The MLP half of a transformer block as an interface: the block hands it its normed input
// (norm2's output) and adds what it returns to the residual. Two implementations, chosen per
// layer in make_mlp: the dense MLP (model/dense_mlp.h: GELU, SwiGLU or GeGLU) and the sparse
// Mixture-of-Experts (model/moe_mlp.h: router -> dispatch -> experts -> combine), whose
// parameters are under ParamRole::Router and ParamRole::Expert.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // Called once after every optimizer step (the MoE sigmoid_bias router updates its selection
  // bias from the step's expert loads here).
  virtual void after_optimizer_step(const ModelContext& /*ctx*/) {}
  // The step's per-expert loads that after_optimizer_step reads (summed over the step's
  // micro-batches), so that data-parallel ranks can sum them over the ranks first; null when the
  // MLP keeps none.
  virtual std::vector<int64_t>* step_loads() { return nullptr; }
  // The router's figures of the last forward (MoE layers), else null.
  struct MoeStats {
    std::vector<int64_t> routed;  // (E) slots routed to each expert
    int64_t tokens = 0, dropped = 0;
    double aux = 0, z = 0;  // the load-balance and z-loss terms (coefficients included)
    double entropy = 0;     // mean over tokens of the router softmax's entropy (nats)
  };
  virtual const MoeStats* moe_stats() const { return nullptr; }
  // What the layer did that the run's log should say (expert buffers grown), once; empty when
  // nothing.
  virtual std::string take_note() { return {}; }
};

// The MLP's activation of kind k: act (N, H) from fc (N, FC): GELU (FC = H), SwiGLU or GeGLU
// (FC = 2H, [gate | up]); and its backward, dfc (N, FC) += from dact (N, H).
void mlp_activation_forward(Backend& be, MlpKind k, const Tensor& act, const Tensor& fc, int N,
                            int H);
void mlp_activation_backward(Backend& be, MlpKind k, const Tensor& dfc, const Tensor& dact,
                             const Tensor& fc, int N, int H);

// The MLP of layer `layer` (parameters named prefix + "mlp.*"), for N = B*T rows: the MoE MLP on
// the config's MoE layers (MoeConfig::is_moe_layer), else the dense MLP of the config's kind.
std::unique_ptr<Mlp> make_mlp(const ModelContext& ctx, const std::string& prefix, int layer,
                              int64_t N);

}  // namespace eco
