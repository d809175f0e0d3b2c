// kernels/cuda/multi_tensor_update.cu (emulated; + the plan of multi_tensor_update.cpp, its
// tables "uploaded" by the shim's cudaMemcpyAsync): fp32_plain_update_many against the
// per-tensor kernel fp32_plain_update (optimizer_update.cu, emulated) and the CPU loops
// (optimizer_rules.h's AdamWRule / SgdmRule steps), under AdamW and SGDM, bit for bit over 3
// steps: params, m, v. Tensors of sizes {0, 1, 3, 768, chunk - 1, chunk, chunk + 1,
// 3 chunks + 7, 50000} in five groups of buffer misalignments (all aligned, all one float off,
// only grad, only v, two of four); distinct weight decays; 0xFF gaps between tensors that must
// stay untouched; the plan is rebuilt only when the list changes; AdamW without v is refused.
// The kernels have no barrier or shuffle: they run in the emulator's sequential mode.
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "emu_common.h"
#include "kernels/cuda/multi_tensor_update.cuh"
#include "kernels/cuda/optimizer_update.cuh"

namespace {

using namespace emuh;
namespace ec = eco::cuda;

struct Layout {
  // per tensor: its offset (floats) in each of the 4 arenas (param, grad, m, v), its size
  std::vector<std::array<int64_t, 4>> off;
  std::vector<int64_t> n;
  std::vector<float> wd;
  std::array<int64_t, 4> total{};
};

Layout make_layout() {
  const int64_t K = ec::kMultiTensorChunk;
  const int64_t sizes[] = {0, 1, 3, 768, K - 1, K, K + 1, 3 * K + 7, 50000};
  // misalignment (floats) of param, grad, m, v per group
  const int64_t groups[][4] = {
      {0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 0, 0}, {0, 0, 0, 3}, {2, 0, 2, 0}};
  Layout l;
  int k = 0;
  for (auto& g : groups)
    for (int64_t n : sizes) {
      std::array<int64_t, 4> o;
      for (int b = 0; b < 4; ++b) {
        l.total[b] += 5 + k % 3;                       // a gap of 5..7 floats
        l.total[b] = (l.total[b] + 3) / 4 * 4 + g[b];  // 16-byte aligned start + misalignment
        o[b] = l.total[b];
        l.total[b] += n;
      }
      l.off.push_back(o);
      l.n.push_back(n);
      l.wd.push_back(k % 4 == 0 ? 0.0f : 0.003f * float(k));
      ++k;
    }
  for (auto& t : l.total) t += 7;
  return l;
}

// An arena of `total` floats: tensor values inside, 0xFF (NaN) in the gaps.
std::vector<float> arena(const Layout& l, int b, uint64_t seed, float sd, bool square) {
  std::vector<float> a(size_t(l.total[size_t(b)]));
  std::memset(a.data(), 0xFF, a.size() * 4);
  const std::vector<float> r = randn(a.size(), seed, sd);
  for (size_t t = 0; t < l.n.size(); ++t)
    for (int64_t i = 0; i < l.n[t]; ++i) {
      const size_t j = size_t(l.off[t][size_t(b)] + i);
      a[j] = square ? r[j] * r[j] : r[j];
    }
  return a;
}

bool gaps_intact(const std::vector<float>& a, const Layout& l, int b) {
  std::vector<char> inside(a.size(), 0);
  for (size_t t = 0; t < l.n.size(); ++t)
    for (int64_t i = 0; i < l.n[t]; ++i) inside[size_t(l.off[t][size_t(b)] + i)] = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &a[i], 4);
    if (!inside[i] && u != 0xFFFFFFFFu) return false;
  }
  return true;
}

void run(Tally& tally, bool adamw) {
  const Layout l = make_layout();
  const char* name = adamw ? "adamw" : "sgdm";
  // Three copies of the state: the multi-tensor launch, the per-tensor kernels, the CPU loop.
  std::vector<float> w0 = arena(l, 0, 1, 0.05f, false), m0 = arena(l, 2, 3, 1e-3f, false),
                     v0 = arena(l, 3, 4, 1e-3f, true);
  Guarded<float> mw(w0), mm(m0), mv(v0), pw(w0), pm(m0), pv(v0);
  std::vector<float> cw = w0, cm = m0, cv = v0;
  std::vector<ec::MultiTensorSlice> slices;
  for (size_t t = 0; t < l.n.size(); ++t)
    slices.push_back({mw.data() + l.off[t][0], nullptr, mm.data() + l.off[t][2],
                      adamw ? mv.data() + l.off[t][3] : nullptr, l.n[t], l.wd[t]});
  Guarded<float> g(arena(l, 1, 10, 0.01f, false));
  for (size_t t = 0; t < l.n.size(); ++t) slices[t].grad = g.data() + l.off[t][1];
  ec::MultiTensorPlan plan;
  int64_t chunks_expected = 0;
  for (int64_t n : l.n) chunks_expected += (n + ec::kMultiTensorChunk - 1) / ec::kMultiTensorChunk;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::string tag = std::string(name) + " step " + std::to_string(step);
    auto check = [&](bool ok, const std::string& what) {
      ++tally.cases;
      if (!ok) tally.fail(tag + ": " + what);
    };
    g.set(arena(l, 1, 10 + uint64_t(step), 0.01f, false));  // same buffer: the plan is reused
    plan.build(slices, adamw, nullptr);
    check(plan.chunks() == chunks_expected, "chunks " + std::to_string(plan.chunks()));
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f;
    const eco::RuleStep ac = eco::adamw_step(lr, b1, b2, 1e-8f, 0.0f, 0.5f, step);
    const eco::RuleStep sc = eco::sgdm_step(0.05f, 0.9f, 0.0f, 0.5f);
    check(ec::fp32_plain_update_many(plan, adamw ? ac : sc) == cudaSuccess, "launch");
    for (size_t t = 0; t < l.n.size(); ++t) {
      const int64_t n = l.n[t];
      float* p = pw.data() + l.off[t][0];
      const float* gg = g.data() + l.off[t][1];
      float* m = pm.data() + l.off[t][2];
      float* v = pv.data() + l.off[t][3];
      eco::RuleStep a = ac;
      eco::RuleStep s = sc;
      a.weight_decay = s.weight_decay = l.wd[t];
      check(ec::fp32_plain_update(p, gg, m, adamw ? v : nullptr, n, adamw ? a : s) == cudaSuccess,
            "per-tensor launch");
      const std::vector<float> gh = g.host();
      for (int64_t i = 0; i < n; ++i) {
        float& W = cw[size_t(l.off[t][0] + i)];
        const float G = gh[size_t(l.off[t][1] + i)];
        float& Mo = cm[size_t(l.off[t][2] + i)];
        float& Vo = cv[size_t(l.off[t][3] + i)];
        if (adamw) {
          W = eco::AdamWRule<float>(a).step(W, G, Mo, Vo);
        } else {
          W = eco::SgdmRule<float>(s).step(W, G, Mo);
        }
      }
    }
    long first = -1;
    const char* names[] = {"param", "grad", "m", "v"};
    Guarded<float>* multi[] = {&mw, nullptr, &mm, &mv};
    Guarded<float>* per[] = {&pw, nullptr, &pm, &pv};
    std::vector<float>* cpu[] = {&cw, nullptr, &cm, &cv};
    for (int b : {0, 2, 3}) {
      const std::vector<float> x = multi[b]->host();
      long k = differ(x, per[b]->host(), &first);
      check(k == 0, std::string(names[b]) + " differs from the per-tensor kernel: " +
                        std::to_string(k) + " first " + std::to_string(first));
      k = differ(x, *cpu[b], &first);
      check(k == 0, std::string(names[b]) + " differs from the CPU loop: " + std::to_string(k) +
                        " first " + std::to_string(first));
      check(gaps_intact(x, l, b), std::string(names[b]) + " gap written");
      check(multi[b]->guards_intact(), std::string(names[b]) + " guards");
    }
    if (!adamw) check(differ(mv.host(), v0) == 0, "sgdm touched v");
    check(g.guards_intact() && gaps_intact(g.host(), l, 1), "grad changed");
  }
  ++tally.cases;
  if (plan.builds() != 1)
    tally.fail(std::string(name) + ": builds " + std::to_string(plan.builds()) +
               " over 3 steps of one list (expected 1)");
  // Unchanged list: no rebuild; a changed weight decay: rebuild.
  const int64_t b0 = plan.builds();
  plan.build(slices, adamw, nullptr);
  ++tally.cases;
  if (plan.builds() != b0) tally.fail(std::string(name) + ": rebuilt an unchanged list");
  slices[3].weight_decay += 1.0f;
  plan.build(slices, adamw, nullptr);
  ++tally.cases;
  if (plan.builds() != b0 + 1) tally.fail(std::string(name) + ": did not rebuild a changed list");
  // A tensor without v under AdamW is refused with a message naming it.
  if (adamw) {
    auto bad = slices;
    bad[5].v = nullptr;
    ++tally.cases;
    try {
      plan.build(bad, true, nullptr);
      tally.fail("adamw: a slice without v was accepted");
    } catch (const eco::Error&) {
    }
  }
}
}  // namespace

TEST(EmuMultiTensorUpdate, AdamWManyEqualsPerTensorKernelsAndCpu) {
  Tally tally;
  emu::sequential = true;
  run(tally, true);
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMultiTensorUpdate, SgdmManyEqualsPerTensorKernelsAndCpu) {
  Tally tally;
  emu::sequential = true;
  run(tally, false);
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}
