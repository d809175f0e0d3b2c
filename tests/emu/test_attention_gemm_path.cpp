// kernels/cuda/attention_gemm.cpp, the whole GEMM path (emulated: the cuBLASLt strided batched
// GEMMs through GemmEngine on shim/cublasLt.h, the row kernels through the thread emulator)
// against the CPU twin, as tests/gpu/test_attention_gpu.cu checks it (attention_twin.h:
// tolerances, poisoned outputs and scratch, guard bands). Head sizes 8 (the smallest the path
// takes), 32, 64, 72 (not a power of two), 128; ragged T (1, 7: a row stride of 8 > T, 17, 65,
// 130: ld 136); several sequences (the per-sequence loop, its lse / D row offsets); lse exchanged
// with the flash kernel both ways; the same bits with the row kernels' blocks reversed; the
// argument checks.
#include <cstdio>
#include <string>
#include <vector>

#include "attention_twin.h"
#include "sweep.h"
#include "base/error.h"

namespace {

using attn::kFlash;
using attn::kGemm;
using attn::Shape;
using emuh::bf16p;

// (T 130 over one sequence by default, sweep.h: {2, 7} and {2, 17} take the per-sequence loop.)
const std::vector<Shape> kShapes = {{1, 1, 1, 32},  {2, 7, 2, 8},
                                    {2, 17, 3, 64}, {1, 65, 2, 72},
                                    {emuh::full_sweep() ? 2 : 1, 130, 2, 32}, {1, 33, 1, 128}};

TEST(EmuAttentionGemmPath, ForwardMatchesCpuTwin) {
  attn::Worst worst;
  attn::expect_forward_matches_cpu(kGemm, kShapes, worst);
  std::printf("[   emu    ] gemm forward worst: out rel %.2e, lse %.2e\n", worst.out, worst.lse);
}

TEST(EmuAttentionGemmPath, BackwardAccumulatesCpuTwinsGradient) {
  attn::Worst worst;
  attn::expect_backward_matches_cpu(kGemm, kGemm, kShapes, worst);
  std::printf("[   emu    ] gemm backward worst: dqkv rel %.2e, gradient parts %.2e\n", worst.dqkv,
              worst.grad);
}

// The backend may run a forward on one path and its backward on another: the same lse.
TEST(EmuAttentionGemmPath, BackwardTakesTheFlashKernelsLseAndViceVersa) {
  attn::Worst worst;
  const std::vector<Shape> shapes = {{2, emuh::full_sweep() ? 33 : 17, 2, 32}};
  attn::expect_backward_matches_cpu(kFlash, kGemm, shapes, worst);
  attn::expect_backward_matches_cpu(kGemm, kFlash, shapes, worst);
}

TEST(EmuAttentionGemmPath, ForwardAndBackwardAreTheSameInAnyBlockOrder) {
  attn::expect_deterministic(kGemm, {2, 40, 2, 32});
}

// One plan per distinct GEMM of a shape: the second forward + backward at that shape queries no
// heuristic (the backward's S recompute is the forward's plan).
TEST(EmuAttentionGemmPath, ReusesItsPlansAcrossCallsAndSequences) {
  const Shape s{3, 24, 2, 16};
  eco::cuda::GemmEngine engine;
  const attn::Bf16Data qkv = attn::random_bf16(s.n_qkv(), 11, 1.0f),
                       dout = attn::random_bf16(s.n_out(), 12, 1.0f);
  emuh::Guarded<uint16_t> d_qkv(qkv.bits), d_dout(dout.bits), d_out(s.n_out()),
      d_dqkv(std::vector<uint16_t>(s.n_qkv(), 0));
  emuh::Guarded<float> d_lse(s.n_lse()), d_D(s.n_lse());
  auto scratch = attn::poisoned_scratch(s);
  const auto run = [&] {
    eco::cuda::attention_gemm_forward(engine, bf16p(d_out), d_lse.data(), bf16p(d_qkv),
                                      scratch.get(), scratch.bytes(), s.B, s.T, s.C(), s.NH);
    eco::cuda::attention_gemm_backward(engine, bf16p(d_dqkv), d_D.data(), scratch.get(),
                                       scratch.bytes(), bf16p(d_dout), bf16p(d_qkv),
                                       bf16p(d_out), d_lse.data(), s.B, s.T, s.C(), s.NH);
  };
  run();
  // Forward: S, O; backward: S (the forward's), dV, dP, dQ, dK (dQ and dK differ in trans_a).
  EXPECT_EQ(engine.heuristic_queries(), 6);
  run();
  EXPECT_EQ(engine.heuristic_queries(), 6) << "the second call must hit the plan cache";
}

void expect_throws_naming(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an eco::Error containing \"" << needle << "\"";
  } catch (const eco::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Head size not a multiple of 8, a misaligned matrix, a scratch too small or misaligned: refused
// on the host with the shapes named, before any GEMM (no heuristic query).
TEST(EmuAttentionGemmPath, RejectsShapesAndBuffersItCannotTake) {
  eco::cuda::GemmEngine engine;
  const Shape s{1, 8, 2, 16};
  emuh::Guarded<uint16_t> qkv(s.n_qkv() + 8), out(s.n_out() + 8);
  emuh::Guarded<float> lse(s.n_lse());
  auto scratch = attn::poisoned_scratch(s);
  const auto fwd = [&](attn::bf16* o, int C, int NH, void* scr, size_t bytes) {
    return [&, o, C, NH, scr, bytes] {
      eco::cuda::attention_gemm_forward(engine, o, lse.data(), bf16p(qkv), scr, bytes, s.B, s.T,
                                        C, NH);
    };
  };
  EXPECT_TRUE(
      eco::cuda::attention_gemm_supported(s.B, s.T, s.C(), s.NH, {bf16p(qkv), bf16p(out)}));
  expect_throws_naming(fwd(bf16p(out), 36, 3, scratch.get(), scratch.bytes()), "C=36 NH=3");
  expect_throws_naming(fwd(bf16p(out) + 1, s.C(), s.NH, scratch.get(), scratch.bytes()),
                       "16-byte aligned");
  expect_throws_naming(fwd(bf16p(out), s.C(), s.NH, scratch.get(), scratch.bytes() - 1),
                       "scratch");
  expect_throws_naming(fwd(bf16p(out), s.C(), s.NH, static_cast<char*>(scratch.get()) + 16,
                           scratch.bytes() - 16),
                       "256-aligned");
  EXPECT_EQ(engine.heuristic_queries(), 0);
}

}  // namespace
