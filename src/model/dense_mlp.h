// The dense MLP (model/mlp.h): fc linear -> GELU | SwiGLU | GeGLU -> proj linear, forward and
// backward. The gated kinds' fc holds the gate rows [0, H) and the up rows [H, 2H) (ModelConfig::fc_rows).
// Also the MoE layer's shared experts (model/moe_mlp.h): the same MLP under other names and
// widths, with its own copy of the input when its input cast must not touch the caller's.
#pragma once
#include <string>

#include "model/linear.h"
#include "model/mlp.h"

namespace eco {

class DenseMlp : public Mlp {
 public:
  // The layer's dense MLP: parameters prefix + "mlp.{fc,proj}.*", the config's width and kind.
  DenseMlp(const ModelContext& ctx, const std::string& prefix, int layer, int64_t N);
  // An MLP of width H and kind `act` with parameters params + "{fc,proj}.*" and activations
  // named acts + ".{fc,act,in}". own_input: cast the input into a copy of its own (the input
  // stays as it was: the MoE router's gradient needs it uncast) when the fc's cast is not None.
  DenseMlp(const ModelContext& ctx, const std::string& params, const std::string& acts, int H,
           MlpKind act, int64_t N, bool own_input);
  void forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) override;
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                const Tensor& d_out, const Tensor& normed, int N) override;

 private:
  LinearRef fc_, proj_;
  int H_ = 0;
  MlpKind act_kind_ = MlpKind::Gelu;
  Tensor fc_out_;  // (N, H) gelu / (N, 2H) swiglu, geglu
  Tensor act_;     // (N, H)
  Tensor input_;   // (N, C): own_input's cast input, else empty (the input is cast in place)
};

}  // namespace eco
