// device: cuda where it cannot run: the trainer refuses with one clear usage error that says why
// (this build has no CUDA backend, or no CUDA GPU is visible); --plan works for either device.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "model/backend.h"
#include "model/transformer.h"
#include "train/trainer.h"

namespace eco {
namespace {

Config tiny(const std::string& device) {
  return parse_config("device: " + device +
                          "\nmodel: {n_layer: 1, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}"
                          "\ndata: {source: synthetic}\ntrain: {batch_size: 2, max_steps: 1}\n",
                      "cfg.yaml");
}

TEST(Device, CudaIsRefusedWithTheReasonWhereItCannotRun) {
  try {
    Trainer t(tiny("cuda"));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
#if defined(ECO_HAVE_CUDA)
    EXPECT_NE(std::string(e.what()).find("device: cuda but no CUDA GPU is visible"),
              std::string::npos)
        << e.what();
#else
    EXPECT_NE(std::string(e.what()).find(
                  "this build has no CUDA backend (ECO_CUDA=OFF or nvcc not found)"),
              std::string::npos)
        << e.what();
#endif
    return;
  }
#if !defined(ECO_HAVE_CUDA)
  FAIL() << "a build without the CUDA backend made a CUDA trainer";
#else
  GTEST_SKIP() << "a CUDA GPU is visible: the CUDA backend was made";
#endif
}

// The CUDA plan keeps the same static memory (weights, state) but bf16 activations and an
// attention state of (B, NH, T) instead of (B, NH, T, T).
TEST(Device, CudaPlanHasBf16ActivationsAndTheSameStaticMemory) {
  const Config c = tiny("cpu");
  auto cpu = make_planning_backend("cpu");
  auto gpu = make_planning_backend("cuda");
  Transformer a(c.model, *cpu, c.train.batch_size);
  Transformer b(c.model, *gpu, c.train.batch_size);
  EXPECT_EQ(cpu->ledger().static_bytes(), gpu->ledger().static_bytes());
  EXPECT_EQ(cpu->ledger().total(MemCategory::Grads), gpu->ledger().total(MemCategory::Grads));
  EXPECT_LT(gpu->ledger().total(MemCategory::Activations),
            cpu->ledger().total(MemCategory::Activations) * 0.6);
  EXPECT_NE(plan_report(tiny("cuda")).find("static bytes per parameter"), std::string::npos);
}

}  // namespace
}  // namespace eco
