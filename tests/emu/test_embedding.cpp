// kernels/cuda/embedding.cu (emulated) against the CPU twin (kernels/cpu/embedding.cpp):
//  - embedding_forward: every bf16 output equal bit for bit to the twin's fp32 wte[tok] + wpe[t]
//    rounded once (tests/gpu claims 5e-3 norm-wise; one fp32 add and one rounding make it exact
//    here), with and without wpe, into a NaN-poisoned output with guard bands.
//  - embedding_backward: dwte and dwpe (pre-filled, so += is checked) bit for bit equal to the
//    twin on the widened bf16 dout, as tests/gpu/test_layers_gpu.cu claims: each (row, channel)
//    is summed in token order by one thread. Shapes of the GPU test (C ragged against the
//    128-thread channel chunk, N ragged against the 128-token tile, a GPT-2 vocabulary) plus hot
//    repeated tokens over many shards; blocks in reverse order give the same bits; rows of
//    tokens not in the batch, dwpe without wpe, and the guards stay untouched.
// The forward has no barrier (sequential mode); the wte backward ballots and synchronises, so it
// runs threaded (one host thread per CUDA thread, 128 a block).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/embedding.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

struct Shape {
  int B, T, C, V;
};
// tests/gpu/test_layers_gpu.cu's shapes (the last: 128 tokens, a 50257-row table).
const Shape kShapes[] = {
    {1, 1, 16, 11}, {1, 7, 33, 11}, {4, 16, 768, 11}, {1, 257, 1000, 11}, {2, 64, 64, 50257}};

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(g() % uint64_t(V));
  if (n > 2) t[0] = 0, t[n - 1] = V - 1;  // both ends of the table
  return t;
}

std::string shape_tag(const char* what, const Shape& s, bool positions) {
  char name[96];  // (snprintf: "B" + std::to_string trips g++ 12's -Wrestrict at -O3)
  std::snprintf(name, sizeof name, "%s B%d T%d C%d V%d %s", what, s.B, s.T, s.C, s.V,
                positions ? "wpe" : "no-wpe");
  return name;
}

void forward_case(Tally& tally, const Shape& s, bool positions, uint64_t seed) {
  const std::string tag = shape_tag("forward", s, positions);
  const int N = s.B * s.T;
  const size_t n = size_t(N) * s.C;
  const std::vector<float> wte = randn(size_t(s.V) * s.C, seed, 1.0f);
  const std::vector<float> wpe = randn(size_t(s.T) * s.C, seed + 1, 0.5f);
  const std::vector<int32_t> tokens = random_tokens(size_t(N), s.V, seed + 2);
  Guarded<float> d_wte(wte), d_wpe(wpe);
  Guarded<int32_t> d_tok(tokens);
  Guarded<uint16_t> d_out{n};  // NaN (0xFFFF) until written
  emu::sequential = true;
  const cudaError_t e =
      ec::embedding_forward(reinterpret_cast<bf16*>(d_out.data()), d_tok.data(), d_wte.data(),
                            positions ? d_wpe.data() : nullptr, s.B, s.T, s.C);
  emu::sequential = false;
  std::vector<float> ref(n);
  eco::cpu::embedding_forward(ref.data(), tokens.data(), wte.data(),
                              positions ? wpe.data() : nullptr, s.B, s.T, s.C);
  long first = -1;
  const long k = differ(d_out.host(), to_bf16(ref), &first);
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  check(e == cudaSuccess, "launch");
  check(k == 0, std::to_string(k) + " differ from the CPU twin, first " + std::to_string(first));
  check(d_out.guards_intact() && d_wte.guards_intact() && d_wpe.guards_intact(), "guards");
}

// dwte / dwpe after one (emulated) backward from the given pre-filled gradients.
struct Grads {
  std::vector<float> dwte, dwpe;
  bool guards;
};
Grads run_backward(const std::vector<float>& dwte0, const std::vector<float>& dwpe0,
                   const std::vector<uint16_t>& dout, const std::vector<int32_t>& tokens,
                   const Shape& s, bool positions, bool reversed) {
  Guarded<float> dwte(dwte0), dwpe(dwpe0);
  Guarded<uint16_t> d_dout(dout);
  Guarded<int32_t> d_tok(tokens);
  emu::reverse_blocks = reversed;
  const cudaError_t e =
      ec::embedding_backward(dwte.data(), positions ? dwpe.data() : nullptr,
                             reinterpret_cast<bf16*>(d_dout.data()), d_tok.data(), s.B, s.T, s.C);
  emu::reverse_blocks = false;
  return {
      dwte.host(), dwpe.host(),
      e == cudaSuccess && dwte.guards_intact() && dwpe.guards_intact() && d_dout.host() == dout};
}

void backward_case(Tally& tally, const Shape& s, bool positions, const std::vector<int32_t>& tokens,
                   bool also_reversed, uint64_t seed) {
  const std::string tag = shape_tag("backward", s, positions);
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const int N = s.B * s.T;
  const std::vector<uint16_t> dout = to_bf16(randn(size_t(N) * s.C, seed, 1.0f));
  // 16 finite values past each table: a stray += there would leave the 0xFF guard (a NaN) as is.
  const std::vector<float> dwte0 = randn(size_t(s.V) * s.C + 16, seed + 1, 1.0f);
  const std::vector<float> dwpe0 = randn(size_t(s.T) * s.C + 16, seed + 2, 1.0f);
  const Grads got = run_backward(dwte0, dwpe0, dout, tokens, s, positions, false);
  std::vector<float> dwte = dwte0, dwpe = dwpe0, d(dout.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = bf(dout[i]);
  eco::cpu::embedding_backward(dwte.data(), positions ? dwpe.data() : nullptr, d.data(),
                               tokens.data(), s.B, s.T, s.C);
  long first = -1;
  long k = differ(got.dwte, dwte, &first);
  check(k == 0,
        "dwte: " + std::to_string(k) + " differ from the CPU twin, first " + std::to_string(first));
  k = differ(got.dwpe, dwpe, &first);  // without wpe: dwpe0 on both sides
  check(k == 0,
        "dwpe: " + std::to_string(k) + " differ from the CPU twin, first " + std::to_string(first));
  check(got.guards, "launch, guards or dout changed");
  if (also_reversed) {
    const Grads rev = run_backward(dwte0, dwpe0, dout, tokens, s, positions, true);
    check(differ(rev.dwte, got.dwte) == 0 && differ(rev.dwpe, got.dwpe) == 0,
          "reversed block order differs");
  }
}

}  // namespace

TEST(EmuEmbedding, ForwardEqualsCpuTwinRoundedOnce) {
  Tally tally;
  uint64_t seed = 1;
  for (const Shape& s : kShapes)
    for (bool positions : {true, false}) forward_case(tally, s, positions, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuEmbedding, BackwardEqualsCpuTwinBitwise) {
  Tally tally;
  uint64_t seed = 100;
  // Without wpe (only the dwpe launch is skipped) and reversed on the cheaper shapes: threaded
  // launches cost ~5 ms a block here.
  for (const Shape& s : kShapes)
    for (bool positions : {true, false}) {
      if (!positions && s.C > 64) continue;
      const std::vector<int32_t> tokens = random_tokens(size_t(s.B) * s.T, s.V, seed += 10);
      backward_case(tally, s, positions, tokens, s.C <= 64, seed += 10);
    }
  EXPECT_GT(tally.cases, 0);
}

// Hot tokens (every other token one of 0, 1, 2) over 64 shards: many hits per (row, channel),
// summed in token order across tiles; the shard that owns a row is tok % shards.
TEST(EmuEmbedding, BackwardRepeatedTokensEqualCpuTwinBitwise) {
  Tally tally;
  const Shape s{2, 260, 40, 97};  // N = 520: 5 tiles (the last ragged), 65 shards
  std::vector<int32_t> tokens = random_tokens(size_t(s.B) * s.T, s.V, 7);
  for (size_t n = 0; n < tokens.size(); n += 2) tokens[n] = int32_t(n % 3);
  backward_case(tally, s, true, tokens, true, 500);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuEmbedding, RefusesBadShapesAndNullBuffers) {
  const long launches = emu::launches;
  float* f = reinterpret_cast<float*>(16);  // never dereferenced: refused before any launch
  const int32_t* t = reinterpret_cast<const int32_t*>(16);
  bf16* b = reinterpret_cast<bf16*>(16);
  EXPECT_EQ(ec::embedding_forward(b, t, f, f, 1, 1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(ec::embedding_forward(b, t, f, f, -1, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::embedding_forward(nullptr, t, f, f, 1, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::embedding_forward(nullptr, nullptr, nullptr, nullptr, 0, 5, 8), cudaSuccess);
  EXPECT_EQ(ec::embedding_backward(f, f, b, t, 1, -1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::embedding_backward(nullptr, f, b, t, 1, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::embedding_backward(nullptr, nullptr, nullptr, nullptr, 3, 0, 8), cudaSuccess);
  EXPECT_EQ(emu::launches, launches);
}
