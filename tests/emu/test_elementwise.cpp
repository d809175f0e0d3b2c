// kernels/cuda/elementwise.cu (emulated) and the bf16 map of elementwise.cuh under it:
//  - residual_forward / accumulate: every bf16 output equal bit for bit to the CPU twin (fp32 on
//    the widened bf16 inputs) rounded once to bf16: the 16-byte path (all buffers aligned), the
//    element path (all misaligned) and mixed (one input misaligned), out separate / aliasing a /
//    aliasing b, n ragged around the 8-element chunk, special values (inf, NaN, -0, overflow,
//    subnormals) in the vector body and the tail; NaN-poisoned outputs and guard bands.
//  - scale_inplace: bit for bit against the CPU twin (one fp32 multiply per element).
//  - scale_inplace_bf16 (Gemma's embedding scale): the CPU twin's fp32 product on the widened
//    input, rounded once, bit for bit, both paths; add_f32 (Gemma's 1 + w gains): the host's
//    fp32 sum bit for bit, out separate or aliasing an input.
// The kernels have no barrier: they run in the emulator's sequential mode.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/elementwise.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

// bf16 bits with special values planted at the front (inside the first 16-byte chunk) and the
// back (the ragged tail): +-inf, NaN, -0, the largest finite bf16 (whose sum overflows), a
// subnormal.
std::vector<uint16_t> bf16_input(size_t n, uint64_t seed, float sd) {
  std::vector<uint16_t> x = to_bf16(randn(n, seed, sd));
  const uint16_t specials[] = {0x7f80, 0xff80, 0x7fc0, 0x8000, 0x7f7f, 0x0001};
  for (size_t k = 0; k < 6 && 2 * k + 1 < n; ++k) {
    x[k] = specials[(k + seed) % 6];
    x[n - 1 - k] = specials[(k + seed + 3) % 6];
  }
  return x;
}

enum Op { RESIDUAL, ACCUMULATE };
enum Align { ALIGNED, MISALIGNED, B_MISALIGNED };
const char* align_name(Align a) {
  return a == ALIGNED ? "aligned" : a == MISALIGNED ? "misaligned" : "b-misaligned";
}
enum Alias { SEPARATE, OUT_IS_A, OUT_IS_B };
const char* alias_name(Alias a) {
  return a == SEPARATE ? "out-separate" : a == OUT_IS_A ? "out=a" : "out=b";
}

void add_case(Tally& tally, Op op, int64_t n, Align al, Alias alias, uint64_t seed) {
  char name[96];  // (snprintf: "n" + std::to_string trips g++ 12's -Wrestrict at -O3)
  std::snprintf(name, sizeof name, "%s n%ld %s %s",
                op == RESIDUAL ? "residual_forward" : "accumulate", long(n), align_name(al),
                alias_name(alias));
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t mis = al == MISALIGNED ? 2 : 0, bmis = al == ALIGNED ? 0 : 2;
  const std::vector<uint16_t> a = bf16_input(size_t(n), seed, 1.0f);
  const std::vector<uint16_t> b = bf16_input(size_t(n), seed + 1, 0.5f);
  Guarded<uint16_t> d_a(a, mis), d_b(b, bmis), d_out(size_t(n), mis);  // out: NaN (0xFFFF)
  cudaError_t e;
  Guarded<uint16_t>& out = op == ACCUMULATE || alias == OUT_IS_A ? d_a
                           : alias == OUT_IS_B                   ? d_b
                                                                 : d_out;
  if (op == ACCUMULATE)
    e = ec::accumulate(bf16p(d_a), bf16p(d_b), n);
  else
    e = ec::residual_forward(bf16p(out), bf16p(d_a), bf16p(d_b), n);
  check(e == cudaSuccess, "launch");
  // The CPU twin in fp32 on the widened inputs, then one rounding.
  std::vector<float> av(a.size()), bv(b.size()), ref(a.size());
  for (size_t i = 0; i < a.size(); ++i) av[i] = bf(a[i]), bv[i] = bf(b[i]);
  if (op == ACCUMULATE) {
    eco::cpu::accumulate(av.data(), bv.data(), n);
    ref = av;
  } else {
    eco::cpu::residual_forward(ref.data(), av.data(), bv.data(), n);
  }
  long first = -1;
  const long k = differ(out.host(), to_bf16(ref), &first);
  check(k == 0,
        std::to_string(k) + " outputs differ from the CPU twin, first " + std::to_string(first));
  if (&out != &d_a) check(d_a.host() == a, "a changed");
  if (&out != &d_b) check(d_b.host() == b, "b changed");
  check(d_a.guards_intact() && d_b.guards_intact() && d_out.guards_intact(), "guards");
}

}  // namespace

TEST(EmuElementwise, ResidualAndAccumulateEqualCpuTwinRoundedOnce) {
  Tally tally;
  uint64_t seed = 10;
  emu::sequential = true;
  for (int64_t n : {1, 7, 8, 9, 16, 255, 257, 2112, 100003})
    for (Align al : {ALIGNED, MISALIGNED, B_MISALIGNED}) {
      for (Alias alias : {SEPARATE, OUT_IS_A, OUT_IS_B})
        add_case(tally, RESIDUAL, n, al, alias, seed += 10);
      add_case(tally, ACCUMULATE, n, al, SEPARATE, seed += 10);
    }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

// One threaded launch with the blocks reversed: the same bits (no block depends on another).
TEST(EmuElementwise, ResidualThreadedReversedBlocksEqualSequential) {
  const int64_t n = 4100;  // 513 chunks of 8: three blocks, the last one ragged
  const std::vector<uint16_t> a = bf16_input(size_t(n), 1, 1.0f),
                              b = bf16_input(size_t(n), 2, 1.0f);
  Guarded<uint16_t> d_a(a), d_b(b), seq{size_t(n)}, thr{size_t(n)};
  emu::sequential = true;
  EXPECT_EQ(ec::residual_forward(bf16p(seq), bf16p(d_a), bf16p(d_b), n), cudaSuccess);
  emu::sequential = false;
  emu::reverse_blocks = true;
  EXPECT_EQ(ec::residual_forward(bf16p(thr), bf16p(d_a), bf16p(d_b), n), cudaSuccess);
  emu::reverse_blocks = false;
  EXPECT_EQ(differ(thr.host(), seq.host()), 0);
  EXPECT_TRUE(thr.guards_intact());
}

// One fp32 multiply per element, as the CPU twin: bit for bit (specials included); nothing past n.
TEST(EmuElementwise, ScaleInplaceEqualsCpuTwinBitwise) {
  Tally tally;
  emu::sequential = true;
  uint64_t seed = 50;
  for (int64_t n : {1, 255, 257, 100003})
    for (float s : {0.37f, -3.0f, 0.0f, 1e-30f}) {
      std::vector<float> x = randn(size_t(n), ++seed, 2.0f);
      const float specials[] = {INFINITY, -INFINITY, std::nanf(""), -0.0f, 3e38f, 1e-45f};
      for (size_t k = 0; k < 6 && k < x.size(); ++k) x[x.size() - 1 - k] = specials[k];
      // 16 finite sentinels past n: a stray x[i] *= s would leave the 0xFF guard (a NaN) as is.
      std::vector<float> buf = x;
      buf.resize(x.size() + 16, 1.5f);
      Guarded<float> d(buf);
      ++tally.cases;
      const cudaError_t e = ec::scale_inplace(d.data(), s, n);
      eco::cpu::scale_inplace(buf.data(), s, n);
      long first = -1;
      const long k = differ(d.host(), buf, &first);
      if (e != cudaSuccess || k != 0 || !d.guards_intact()) {
        char what[96];
        std::snprintf(what, sizeof what, "n%ld s %g: %ld differ, first %ld", long(n), double(s), k,
                      first);
        tally.fail(what);
      }
    }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

// add_inplace_f32 (the trainer's gradient accumulation): acc + x bit for bit as the CPU
// backend's add_inplace adds, signed zeros and non-finite values included, guards untouched.
TEST(EmuElementwise, AddInplaceF32EqualsHostAddBitwise) {
  Tally tally;
  emu::sequential = true;
  uint64_t seed = 70;
  for (int64_t n : {1, 257, 10007}) {
    std::vector<float> acc = randn(size_t(n), ++seed, 1.0f), x = randn(size_t(n), ++seed, 1e-3f);
    const float a_sp[] = {0.0f, -0.0f, 0.0f, INFINITY, 3e38f, 1.0f};
    const float x_sp[] = {-0.0f, -0.0f, 0.0f, -INFINITY, 3e38f, -1.0f};
    for (size_t k = 0; k < 6 && k < acc.size(); ++k) acc[k] = a_sp[k], x[k] = x_sp[k];
    Guarded<float> d_acc(acc), d_x(x);
    ++tally.cases;
    const cudaError_t e = ec::add_inplace_f32(d_acc.data(), d_x.data(), n);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + x[i];
    long first = -1;
    const long k = differ(d_acc.host(), acc, &first);
    if (e != cudaSuccess || k != 0 || !d_acc.guards_intact() || d_x.host() != x)
      tally.fail("n " + std::to_string(n) + ": " + std::to_string(k) + " differ, first " +
                 std::to_string(first));
  }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuElementwise, ScaleInplaceBf16EqualsCpuTwinRoundedOnce) {
  Tally tally;
  emu::sequential = true;
  uint64_t seed = 90;
  for (int64_t n : {1, 9, 257, 10007})
    for (bool misaligned : {false, true})
      for (float s : {33.941125f /* sqrt(1152) */, 8.0f, -0.5f}) {
        const std::vector<uint16_t> x = bf16_input(size_t(n), ++seed, 1.0f);
        Guarded<uint16_t> d(x, misaligned ? 2 : 0);
        ++tally.cases;
        const cudaError_t e = ec::scale_inplace_bf16(bf16p(d), s, n);
        std::vector<float> ref(x.size());
        for (size_t i = 0; i < x.size(); ++i) ref[i] = bf(x[i]);
        eco::cpu::scale_inplace(ref.data(), s, n);
        long first = -1;
        const long k = differ(d.host(), to_bf16(ref), &first);
        if (e != cudaSuccess || k != 0 || !d.guards_intact())
          tally.fail("n " + std::to_string(n) + (misaligned ? " misaligned" : " aligned") + ": " +
                     std::to_string(k) + " differ, first " + std::to_string(first));
      }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuElementwise, AddF32EqualsHostAddBitwise) {
  Tally tally;
  emu::sequential = true;
  uint64_t seed = 110;
  for (int64_t n : {1, 256, 1153})
    for (int alias : {0, 1, 2}) {  // out separate, out = a, out = b
      const std::vector<float> a = randn(size_t(n), ++seed, 0.1f), b(size_t(n), 1.0f);
      Guarded<float> d_a(a), d_b(b), d_out{size_t(n)};
      float* out = alias == 0 ? d_out.data() : alias == 1 ? d_a.data() : d_b.data();
      ++tally.cases;
      const cudaError_t e = ec::add_f32(out, d_a.data(), d_b.data(), n);
      std::vector<float> ref(a.size());
      for (size_t i = 0; i < a.size(); ++i) ref[i] = a[i] + b[i];
      Guarded<float>& got = alias == 0 ? d_out : alias == 1 ? d_a : d_b;
      if (e != cudaSuccess || differ(got.host(), ref) != 0 || !got.guards_intact())
        tally.fail("n " + std::to_string(n) + " alias " + std::to_string(alias));
    }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuElementwise, RefusesNegativeSizesAndNullBuffers) {
  bf16* p = reinterpret_cast<bf16*>(16);  // never dereferenced: refused before any launch
  const long launches = emu::launches;
  EXPECT_EQ(ec::residual_forward(nullptr, nullptr, nullptr, 0), cudaSuccess);
  EXPECT_EQ(ec::residual_forward(p, p, p, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::residual_forward(p, nullptr, p, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::accumulate(p, nullptr, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::scale_inplace(nullptr, 1.0f, 0), cudaSuccess);
  EXPECT_EQ(ec::scale_inplace(nullptr, 1.0f, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::scale_inplace(reinterpret_cast<float*>(16), 1.0f, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::add_inplace_f32(nullptr, nullptr, 0), cudaSuccess);
  EXPECT_EQ(ec::add_inplace_f32(reinterpret_cast<float*>(16), nullptr, 3), cudaErrorInvalidValue);
  EXPECT_EQ(ec::scale_inplace_bf16(nullptr, 2.0f, 3), cudaErrorInvalidValue);
  EXPECT_EQ(ec::add_f32(reinterpret_cast<float*>(16), nullptr, nullptr, 3), cudaErrorInvalidValue);
  EXPECT_EQ(emu::launches, launches);
}
