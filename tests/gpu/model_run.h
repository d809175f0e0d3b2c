// A backend with a model and its optimizer on it, and a few training steps on the synthetic
// corpus: what the whole-model tests run on the CPU backend and on the CUDA backend (tests/gpu)
// or the emulated CUDA backend (tests/emu/backend) to compare their loss sequences. Plain C++.
#pragma once
#include <memory>
#include <vector>

#include "core/config.h"
#include "data/loader.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "base/treatment.h"

namespace eco {

// The model is destroyed first: it holds the backend.
struct ModelRun {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Optimizer> opt;
};

inline ModelRun make_run(std::unique_ptr<Backend> be, const Config& c) {
  ModelRun r;
  r.be = std::move(be);
  r.model = std::make_unique<Transformer>(c.model, *r.be, c.train.batch_size,
                                          c.precision.treatment, c.precision.quantize);
  r.opt = std::make_unique<Optimizer>(c.optim, *r.model, c.train.seed);
  r.model->init_weights(c.train.seed);
  return r;
}

// `steps` optimizer steps of batch c.train.batch_size on the synthetic corpus; the losses.
inline std::vector<double> train(ModelRun& r, const Config& c, int steps) {
  const int B = c.train.batch_size, T = c.model.seq_len;
  const DataLoader data =
      DataLoader::synthetic(0, LoaderOptions{B, T, c.model.vocab_size, c.train.seed, false});
  std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    r.model->zero_grad();
    data.batch(s, in.data(), tgt.data());
    losses.push_back(r.model->forward_backward(in.data(), tgt.data(), B, T, 1.0f));
    r.opt->step(lr_at(c.optim, s, c.warmup_steps(), c.total_steps()), r.opt->grad_norm());
    r.model->after_optimizer_step();  // (the sigmoid_bias router's bias update)
  }
  return losses;
}

}  // namespace eco
