// kernels/cuda/moe.cu (emulated) against the CPU twins (kernels/cpu/moe.cpp, fp32 on the widened
// bf16 inputs, bf16 outputs rounded once):
//  - moe_route, moe_router_backward: bit for bit (both run moe_router.h's per-token code with
//    glibc's expf / logf here), every router mode, norm_topk on / off, aux and z terms on / off,
//    ties (logits on a coarse grid, whole rows equal).
//  - moe_router_sums: within 2 N 2^-53 of the sum of |terms| (two orders of N double additions),
//    the same bits with blocks reversed; no tokens gives zeros.
//  - moe_dispatch: row_of_slot, token_of_row and counts equal to the twin's (capacity N k, same
//    align) exactly, align 1 and 16, random routings, empty experts, every token to one expert,
//    no tokens, chunks over two blocks with blocks reversed; token -1 on every row past the last
//    segment; out-of-range expert ids not routed; guard bands (scratch included).
//  - gather, combine, scatter_add, combine_backward's dy: bit for bit (fp32 sums in j order from
//    0, one rounding), 16-byte and element paths (C 72 aligned, C 33, C 72 misaligned), dropped
//    slots, NaN padding rows of y / drows never read, dy's padding rows untouched;
//    combine_backward's dgates within 2 C 2^-24 sum_c |dout_c y_c| (the twin sums in channel
//    order, the kernel per lane then a butterfly: each is within (C - 1) 2^-24 of that sum).
//  - every launcher's refusals of bad shapes and null buffers, before any launch.
// Kernels without barriers or shuffles run in sequential mode; the sums, the dispatch (scans) and
// combine_backward (a warp per slot) run threaded: shapes stay small (N <= 300, E <= 16, but
// 1100 tokens for a dispatch over two blocks of chunks).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/moe.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;
using eco::MoeRouter;

const char* mode_name(MoeRouter m) {
  return m == MoeRouter::TopkSoftmax   ? "topk_softmax"
         : m == MoeRouter::SoftmaxTopk ? "softmax_topk"
                                       : "sigmoid_bias";
}
constexpr MoeRouter kModes[] = {MoeRouter::TopkSoftmax, MoeRouter::SoftmaxTopk,
                                MoeRouter::SigmoidBias};

struct Checker {
  Tally& tally;
  std::string tag;
  void operator()(bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  }
};

std::string diff_text(long n, long first) {
  return std::to_string(n) + " differ from the CPU twin, first " + std::to_string(first);
}

// Logits on a grid of 0.25 in [-2, 2] (many ties), every 7th row all equal.
std::vector<float> tied_logits(int N, int E, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> z(size_t(N) * E);
  for (auto& v : z) v = float(int(g() % 17) - 8) * 0.25f;
  for (int t = 0; t < N; t += 7) std::fill_n(z.begin() + int64_t(t) * E, E, 0.5f);
  return z;
}

// ---- router -----------------------------------------------------------------------------------

struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> gates, probs, lse;
};

Routed twin_route(const std::vector<float>& z, const std::vector<float>& bias, int N, int E, int k,
                  MoeRouter mode, bool norm) {
  Routed r{std::vector<int32_t>(size_t(N) * k), std::vector<float>(size_t(N) * k),
           std::vector<float>(size_t(N) * E), std::vector<float>(size_t(N))};
  eco::cpu::moe_route(r.idx.data(), r.gates.data(), r.probs.data(), r.lse.data(), z.data(),
                      bias.data(), N, E, k, mode, norm);
  return r;
}

void route_case(Tally& tally, int N, int E, int k, MoeRouter mode, bool norm, uint64_t seed) {
  char name[96];
  std::snprintf(name, sizeof name, "route N%d E%d k%d %s norm%d", N, E, k, mode_name(mode), norm);
  Checker check{tally, name};
  const std::vector<float> z = tied_logits(N, E, seed);
  // SigmoidBias: a bias on the same coarse grid (ties in s + b), zero for the first experts.
  std::vector<float> bias(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) bias[size_t(e)] = e < E / 2 ? 0.0f : float(e % 3) * 0.125f;
  Guarded<float> d_z(z), d_bias(bias), d_gates(size_t(N) * k), d_probs(size_t(N) * E),
      d_lse(static_cast<size_t>(N));
  Guarded<int32_t> d_idx(size_t(N) * k);
  emu::sequential = true;
  const cudaError_t e = ec::moe_route(d_idx.data(), d_gates.data(), d_probs.data(), d_lse.data(),
                                      d_z.data(), d_bias.data(), N, E, k, mode, norm);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  const Routed ref = twin_route(z, bias, N, E, k, mode, norm);
  long first = -1, n;
  n = differ(d_idx.host(), ref.idx, &first);
  check(n == 0, "idx: " + diff_text(n, first));
  n = differ(d_gates.host(), ref.gates, &first);
  check(n == 0, "gates: " + diff_text(n, first));
  n = differ(d_probs.host(), ref.probs, &first);
  check(n == 0, "probs: " + diff_text(n, first));
  n = differ(d_lse.host(), ref.lse, &first);
  check(n == 0, "lse: " + diff_text(n, first));
  check(d_idx.guards_intact() && d_gates.guards_intact() && d_probs.guards_intact() &&
            d_lse.guards_intact() && d_z.host() == z,
        "guards or logits changed");
}

void router_backward_case(Tally& tally, int N, int E, int k, MoeRouter mode, bool norm, bool aux,
                          bool zloss, uint64_t seed) {
  char name[128];
  std::snprintf(name, sizeof name, "router_backward N%d E%d k%d %s norm%d aux%d z%d", N, E, k,
                mode_name(mode), norm, aux, zloss);
  Checker check{tally, name};
  const std::vector<float> z = randn(size_t(N) * E, seed, 1.5f);
  std::vector<float> bias(size_t(E), 0.0f);
  for (int e = 0; e < E; ++e) bias[size_t(e)] = 0.01f * float(e % 5);
  const Routed r = twin_route(z, bias, N, E, k, mode, norm);
  const std::vector<float> dgates = randn(size_t(N) * k, seed + 1, 1.0f);
  const std::vector<float> dz0 = randn(size_t(N) * E, seed + 2, 0.5f);  // += is checked
  // The twin takes aux_w in double and converts it to fp32: give it fp32 values.
  const std::vector<float> aux_w = randn(size_t(E), seed + 3, 0.1f, 0.2f);
  const float z_coef = zloss ? 0.0625f : 0.0f;
  Guarded<float> d_dz(dz0), d_dg(dgates), d_gates(r.gates), d_probs(r.probs), d_z(z), d_lse(r.lse),
      d_aux(aux_w);
  Guarded<int32_t> d_idx(r.idx);
  emu::sequential = true;
  const cudaError_t e = ec::moe_router_backward(
      d_dz.data(), d_dg.data(), d_idx.data(), d_gates.data(), d_probs.data(), d_z.data(),
      d_lse.data(), aux ? d_aux.data() : nullptr, z_coef, N, E, k, mode, norm);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  std::vector<float> ref = dz0;
  const std::vector<double> aux_d =
      aux ? std::vector<double>(aux_w.begin(), aux_w.end()) : std::vector<double>();
  eco::cpu::moe_router_backward(ref.data(), dgates.data(), r.idx.data(), r.gates.data(),
                                r.probs.data(), z.data(), r.lse.data(), aux_d, double(z_coef), N, E,
                                k, mode, norm);
  long first = -1;
  const long n = differ(d_dz.host(), ref, &first);
  check(n == 0, "dlogits: " + diff_text(n, first));
  check(d_dz.guards_intact(), "guards");
}

// The sums of N tokens' routing in the kernel's block order (reversed or not).
std::vector<double> run_sums(const Routed& r, int N, int E, bool reversed, bool* ok) {
  Guarded<double> d_sums(size_t(E) + 2);
  Guarded<float> d_probs(r.probs), d_lse(r.lse);
  emu::reverse_blocks = reversed;
  const cudaError_t e = ec::moe_router_sums(d_sums.data(), N ? d_probs.data() : nullptr,
                                            N ? d_lse.data() : nullptr, N, E);
  emu::reverse_blocks = false;
  *ok = e == cudaSuccess && d_sums.guards_intact();
  return d_sums.host();
}

void sums_case(Tally& tally, int N, int E, bool also_reversed, uint64_t seed) {
  char name[64];
  std::snprintf(name, sizeof name, "router_sums N%d E%d", N, E);
  Checker check{tally, name};
  const std::vector<float> z = randn(size_t(N) * E, seed, 2.0f);
  const Routed r =
      twin_route(z, std::vector<float>(size_t(E), 0.0f), N, E, 2, MoeRouter::SoftmaxTopk, false);
  bool ok = false;
  const std::vector<double> got = run_sums(r, N, E, false, &ok);
  check(ok, "launch or guards");
  const eco::MoeRouterSums ref = eco::cpu::moe_router_sums(r.probs.data(), r.lse.data(), N, E);
  // Sums of |terms| (every term is >= 0 but lse^2's): the bound's scale per output.
  std::vector<double> want(ref.prob_sums), scale(ref.prob_sums);
  want.push_back(ref.lse_sq_sum);
  want.push_back(ref.entropy_sum);
  scale.push_back(ref.lse_sq_sum);
  scale.push_back(ref.entropy_sum);
  const double tol = 2.0 * N * std::ldexp(1.0, -53);
  for (int c = 0; c < E + 2; ++c) {
    const double err = std::fabs(got[size_t(c)] - want[size_t(c)]);
    check(err <= tol * scale[size_t(c)] && std::isfinite(got[size_t(c)]),
          "sum " + std::to_string(c) + ": " + std::to_string(got[size_t(c)]) + " vs " +
              std::to_string(want[size_t(c)]));
  }
  if (also_reversed) {
    const std::vector<double> rev = run_sums(r, N, E, true, &ok);
    check(ok && differ(rev, got) == 0, "reversed block order differs");
  }
}

// ---- dispatch ---------------------------------------------------------------------------------

// idx (N, k) of distinct experts per token, drawn from `pool` experts (the first ones, or when
// `stride` > 1 every stride-th, leaving the others empty).
std::vector<int32_t> random_idx(int N, int E, int k, uint64_t seed, int pool = 0, int stride = 1) {
  std::mt19937_64 g(seed);
  if (pool <= 0) pool = E;
  std::vector<int32_t> idx;
  std::vector<int32_t> es(static_cast<size_t>(pool));
  for (int t = 0; t < N; ++t) {
    std::iota(es.begin(), es.end(), 0);
    for (int j = 0; j < k; ++j) {
      std::swap(es[size_t(j)], es[size_t(j) + g() % uint64_t(pool - j)]);
      idx.push_back(es[size_t(j)] * stride);
    }
  }
  return idx;
}

struct GpuDispatch {
  std::vector<int32_t> row_of_slot, token_of_row, counts;
  bool ok;
};

GpuDispatch run_dispatch(const std::vector<int32_t>& idx, int N, int E, int k, int align,
                         bool reversed) {
  const int64_t S = int64_t(N) * k, max_rows = eco::moe_max_rows(S, E, align);
  // Outputs start as 0x7f7f7f7f, not the guards' 0xFF (-1, a value the kernels write).
  const int32_t poison = 0x7f7f7f7f;
  Guarded<int32_t> d_idx(idx), d_ros(std::vector<int32_t>(size_t(S), poison)),
      d_tor(std::vector<int32_t>(size_t(max_rows), poison)),
      d_counts(std::vector<int32_t>(size_t(E), poison)),
      d_scratch(size_t(ec::moe_dispatch_scratch_ints(N, E, k)));
  emu::reverse_blocks = reversed;
  const cudaError_t e = ec::moe_dispatch(d_ros.data(), d_tor.data(), d_counts.data(),
                                         d_scratch.data(), d_idx.data(), N, E, k, align);
  emu::reverse_blocks = false;
  return {d_ros.host(), d_tor.host(), d_counts.host(),
          e == cudaSuccess && d_ros.guards_intact() && d_tor.guards_intact() &&
              d_counts.guards_intact() && d_scratch.guards_intact() && d_idx.host() == idx};
}

// The twin's dispatch (dropless: capacity N k): row_of_slot, token_of_row (max_rows, -1 past
// the last segment as the kernel writes it) and the record.
struct TwinDispatch {
  std::vector<int32_t> row_of_slot, token_of_row;
  eco::MoeDispatch d;
};
TwinDispatch twin_dispatch(const std::vector<int32_t>& idx, int N, int E, int k, int align) {
  const int64_t S = int64_t(N) * k;
  TwinDispatch t{std::vector<int32_t>(size_t(S), -7),
                 std::vector<int32_t>(size_t(eco::moe_max_rows(S, E, align)), -1),
                 {}};
  const std::vector<float> gates(size_t(S), 1.0f);
  t.d = eco::cpu::moe_dispatch(t.row_of_slot.data(), t.token_of_row.data(), idx.data(),
                               gates.data(), N, E, k, S, align);
  return t;
}

void dispatch_case(Tally& tally, const char* what, const std::vector<int32_t>& idx, int N, int E,
                   int k, int align, bool also_reversed) {
  char name[96];
  std::snprintf(name, sizeof name, "dispatch %s N%d E%d k%d align%d", what, N, E, k, align);
  Checker check{tally, name};
  const GpuDispatch got = run_dispatch(idx, N, E, k, align, false);
  check(got.ok, "launch, guards or idx changed");
  const TwinDispatch ref = twin_dispatch(idx, N, E, k, align);
  long first = -1, n;
  n = differ(got.row_of_slot, ref.row_of_slot, &first);
  check(n == 0, "row_of_slot: " + diff_text(n, first));
  n = differ(got.token_of_row, ref.token_of_row, &first);  // -1 past rows on both sides
  check(n == 0, "token_of_row: " + diff_text(n, first));
  std::vector<int32_t> counts(ref.d.counts.begin(), ref.d.counts.end());
  check(got.counts == counts, "counts");
  if (also_reversed) {
    const GpuDispatch rev = run_dispatch(idx, N, E, k, align, true);
    check(rev.ok && rev.row_of_slot == got.row_of_slot && rev.token_of_row == got.token_of_row &&
              rev.counts == got.counts,
          "reversed block order differs");
  }
}

// ---- gather / combine / scatter ---------------------------------------------------------------

// A dispatched routing with bf16 row data: R rows (padding included) of C channels.
struct Layout {
  int N, E, k, C;
  std::vector<int32_t> idx, row_of_slot, token_of_row;
  int64_t R;
};
// Slots dropped (row -1) every `drop`-th slot when drop > 0: the combine skips them.
Layout make_layout(int N, int E, int k, int C, int align, int drop, uint64_t seed) {
  Layout L{N, E, k, C, random_idx(N, E, k, seed), {}, {}, 0};
  TwinDispatch t = twin_dispatch(L.idx, N, E, k, align);
  L.row_of_slot = t.row_of_slot;
  L.token_of_row = t.token_of_row;
  L.R = t.d.rows;
  L.token_of_row.resize(size_t(L.R));
  if (drop > 0)
    for (size_t s = 3; s < L.row_of_slot.size(); s += size_t(drop)) L.row_of_slot[s] = -1;
  return L;
}

// Row data (R, C) in bf16 bits with NaN on the padding rows (never read by combine / scatter).
std::vector<uint16_t> rows_data(const Layout& L, uint64_t seed) {
  std::vector<uint16_t> y = to_bf16(randn(size_t(L.R) * L.C, seed, 1.0f));
  for (int64_t r = 0; r < L.R; ++r)
    if (L.token_of_row[size_t(r)] < 0) std::fill_n(y.begin() + r * L.C, L.C, uint16_t(0x7fc0));
  return y;
}
std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf(b[i]);
  return v;
}

enum Path { VEC, ELEMENT, MISALIGNED };  // C 72 aligned, C 33, C 72 two bytes off
const char* path_name(Path p) { return p == VEC ? "vec" : p == ELEMENT ? "element" : "misaligned"; }
int path_c(Path p) { return p == ELEMENT ? 33 : 72; }
size_t path_mis(Path p) { return p == MISALIGNED ? 2 : 0; }
constexpr Path kPaths[] = {VEC, ELEMENT, MISALIGNED};

void gather_case(Tally& tally, Path p, uint64_t seed) {
  const Layout L = make_layout(150, 8, 2, path_c(p), 16, 0, seed);
  Checker check{tally, std::string("gather ") + path_name(p)};
  const std::vector<uint16_t> x = to_bf16(randn(size_t(L.N) * L.C, seed + 1, 1.0f));
  const size_t mis = path_mis(p);
  Guarded<uint16_t> d_x(x, mis), d_rows(size_t(L.R) * L.C, mis);
  Guarded<int32_t> d_tor(L.token_of_row);
  emu::sequential = true;
  const cudaError_t e = ec::moe_gather(bf16p(d_rows), bf16p(d_x), d_tor.data(), L.R, L.C);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  std::vector<float> ref(size_t(L.R) * L.C);
  eco::cpu::moe_gather(ref.data(), widen(x).data(), L.token_of_row.data(), L.R, L.C);
  long first = -1;
  const long n = differ(d_rows.host(), to_bf16(ref), &first);
  check(n == 0, "rows: " + diff_text(n, first));
  check(d_rows.guards_intact() && d_x.host() == x, "guards or x changed");
}

// The weighted sums into (N, C): the combine (written or accumulated) and scatter_add (+=,
// unweighted), from rows with NaN padding and some slots dropped.
enum SumOp { COMBINE, COMBINE_ACC, SCATTER_ADD };
const char* op_name(SumOp o) {
  return o == COMBINE ? "combine =" : o == COMBINE_ACC ? "combine +=" : "scatter_add";
}

void sum_case(Tally& tally, SumOp op, Path p, uint64_t seed) {
  const Layout L = make_layout(120, 8, 3, path_c(p), 16, op == SCATTER_ADD ? 4 : 5, seed);
  Checker check{tally, std::string(op_name(op)) + " " + path_name(p)};
  const std::vector<uint16_t> y = rows_data(L, seed + 1);
  const std::vector<float> gates = randn(size_t(L.N) * L.k, seed + 2, 0.5f, 0.3f);
  const std::vector<uint16_t> out0 = to_bf16(randn(size_t(L.N) * L.C, seed + 3, 1.0f));
  const size_t mis = path_mis(p);
  Guarded<uint16_t> d_y(y, mis);
  Guarded<uint16_t> d_out = op == COMBINE ? Guarded<uint16_t>(size_t(L.N) * L.C, mis)  // NaN
                                          : Guarded<uint16_t>(out0, mis);
  Guarded<float> d_g(gates);
  Guarded<int32_t> d_ros(L.row_of_slot);
  emu::sequential = true;
  const cudaError_t e =
      op == SCATTER_ADD ? ec::moe_scatter_add(bf16p(d_out), bf16p(d_y), d_ros.data(), L.N, L.C, L.k)
                        : ec::moe_combine(bf16p(d_out), bf16p(d_y), d_g.data(), d_ros.data(), L.N,
                                          L.C, L.k, op == COMBINE_ACC);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  std::vector<float> ref = widen(out0);
  if (op == SCATTER_ADD)
    eco::cpu::moe_scatter_add(ref.data(), widen(y).data(), L.row_of_slot.data(), L.N, L.C, L.k);
  else
    eco::cpu::moe_combine(ref.data(), widen(y).data(), gates.data(), L.row_of_slot.data(), L.N, L.C,
                          L.k, op == COMBINE_ACC);
  long first = -1;
  const long n = differ(d_out.host(), to_bf16(ref), &first);
  check(n == 0, "out: " + diff_text(n, first));
  check(d_out.guards_intact(), "guards");
}

void combine_backward_case(Tally& tally, Path p, uint64_t seed) {
  const Layout L = make_layout(60, 8, 2, path_c(p), 16, 6, seed);
  Checker check{tally, std::string("combine_backward ") + path_name(p)};
  const std::vector<uint16_t> y = rows_data(L, seed + 1);
  const std::vector<uint16_t> dout = to_bf16(randn(size_t(L.N) * L.C, seed + 2, 1.0f));
  const std::vector<float> gates = randn(size_t(L.N) * L.k, seed + 3, 0.5f, 0.3f);
  const size_t mis = path_mis(p);
  Guarded<uint16_t> d_y(y, mis), d_dout(dout, mis), d_dy(size_t(L.R) * L.C, mis);  // dy: NaN
  Guarded<float> d_g(gates), d_dg(size_t(L.N) * L.k);
  Guarded<int32_t> d_ros(L.row_of_slot);
  const cudaError_t e = ec::moe_combine_backward(
      bf16p(d_dy), d_dg.data(), bf16p(d_dout), bf16p(d_y), d_g.data(), d_ros.data(), L.N, L.C, L.k);
  check(e == cudaSuccess, "launch");
  // The twin writes the rows of kept slots; the rest (padding, rows of dropped slots) keep the
  // kernel's untouched NaN (0xFFFF) on both sides.
  std::vector<float> ref_dy(size_t(L.R) * L.C, bf(0xFFFF)), ref_dg(size_t(L.N) * L.k);
  const std::vector<float> dv = widen(dout), yv = widen(y);
  eco::cpu::moe_combine_backward(ref_dy.data(), ref_dg.data(), dv.data(), yv.data(), gates.data(),
                                 L.row_of_slot.data(), L.N, L.C, L.k);
  std::vector<uint16_t> want_dy = to_bf16(ref_dy);
  for (auto& b : want_dy)
    if (b == 0x7fff) b = 0xFFFF;  // to_bf16 canonicalises the untouched NaN
  long first = -1;
  const long n = differ(d_dy.host(), want_dy, &first);
  check(n == 0, "dy: " + diff_text(n, first));
  const std::vector<float> dg = d_dg.host();
  const double u = std::ldexp(1.0, -24);
  long bad = 0;
  for (int64_t s = 0; s < int64_t(L.N) * L.k; ++s) {
    const int32_t row = L.row_of_slot[size_t(s)];
    if (row < 0) {
      bad += dg[size_t(s)] != 0.0f;
      continue;
    }
    double mag = 0;
    for (int c = 0; c < L.C; ++c)
      mag += std::fabs(double(dv[size_t(s / L.k * L.C + c)]) * yv[size_t(int64_t(row) * L.C + c)]);
    bad += !(std::fabs(double(dg[size_t(s)]) - ref_dg[size_t(s)]) <= 2.0 * L.C * u * mag);
  }
  check(bad == 0, "dgates: " + std::to_string(bad) + " outside 2 C 2^-24 sum |terms|");
  check(d_dy.guards_intact() && d_dg.guards_intact(), "guards");
}

}  // namespace

TEST(EmuMoe, RouteEqualsCpuTwinBitwiseInEveryModeWithTies) {
  Tally tally;
  uint64_t seed = 1;
  struct Shape {
    int N, E, k;
  };
  for (const Shape s : {Shape{97, 8, 2}, Shape{200, 16, 4}, Shape{13, 8, 8}, Shape{31, 16, 1}})
    for (MoeRouter m : kModes)
      for (bool norm : {false, true}) route_case(tally, s.N, s.E, s.k, m, norm, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, RouterBackwardEqualsCpuTwinBitwise) {
  Tally tally;
  uint64_t seed = 300;
  for (MoeRouter m : kModes)
    for (bool norm : {false, true})
      for (int terms = 0; terms < 4; ++terms)
        router_backward_case(tally, 90, 16, 4, m, norm, terms & 1, terms & 2, seed += 10);
  router_backward_case(tally, 17, 8, 8, MoeRouter::SoftmaxTopk, true, true, true, 900);  // k = E
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, RouterSumsMatchCpuTwinInDoubleInAnyBlockOrder) {
  Tally tally;
  sums_case(tally, 300, 16, true, 11);
  sums_case(tally, 5, 8, false, 12);  // fewer tokens than threads
  sums_case(tally, 0, 8, false, 13);  // zeros
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, DispatchEqualsCpuTwinExactly) {
  Tally tally;
  for (int align : {1, 16}) {
    dispatch_case(tally, "random", random_idx(300, 16, 4, 21), 300, 16, 4, align, false);
    // Only the even experts chosen: the odd segments are empty (and only padding when aligned).
    dispatch_case(tally, "empty-experts", random_idx(200, 16, 3, 22, 8, 2), 200, 16, 3, align,
                  false);
    dispatch_case(tally, "one-expert", std::vector<int32_t>(130, 5), 130, 8, 1, align, false);
    dispatch_case(tally, "no-tokens", {}, 0, 8, 2, align, false);
  }
  // 1100 x 8 slots: 275 chunks, two blocks of chunk threads, run again with blocks reversed.
  dispatch_case(tally, "two-blocks", random_idx(1100, 12, 8, 23), 1100, 12, 8, 16, true);
  EXPECT_GT(tally.cases, 0);
}

// An expert id outside [0, E) is not routed (row -1, not counted); the others are sorted as if it
// were not there.
TEST(EmuMoe, DispatchLeavesOutOfRangeExpertsUnrouted) {
  const int N = 40, E = 8, k = 2;
  std::vector<int32_t> idx = random_idx(N, E, k, 31);
  idx[3] = -1;
  idx[50] = E;
  const GpuDispatch got = run_dispatch(idx, N, E, k, 1, false);
  ASSERT_TRUE(got.ok);
  EXPECT_EQ(got.row_of_slot[3], -1);
  EXPECT_EQ(got.row_of_slot[50], -1);
  EXPECT_EQ(std::accumulate(got.counts.begin(), got.counts.end(), 0), N * k - 2);
  std::vector<int32_t> next(size_t(E), 0);  // the stable sort by hand: offsets, then slot order
  for (int e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e) - 1] + got.counts[size_t(e) - 1];
  for (int s = 0; s < N * k; ++s) {
    if (s == 3 || s == 50) continue;
    const int32_t row = next[size_t(idx[size_t(s)])]++;
    EXPECT_EQ(got.row_of_slot[size_t(s)], row) << "slot " << s;
    EXPECT_EQ(got.token_of_row[size_t(row)], s / k) << "row " << row;
  }
  EXPECT_EQ(got.token_of_row[size_t(N * k - 2)], -1);  // past the last segment
}

TEST(EmuMoe, GatherCopiesTokensAndZeroesPaddingLikeCpuTwin) {
  Tally tally;
  uint64_t seed = 400;
  for (Path p : kPaths) gather_case(tally, p, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, CombineAndScatterAddEqualCpuTwinRoundedOnce) {
  Tally tally;
  uint64_t seed = 500;
  for (SumOp op : {COMBINE, COMBINE_ACC, SCATTER_ADD})
    for (Path p : kPaths) sum_case(tally, op, p, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, CombineBackwardDyBitwiseAndDgatesWithinReassociation) {
  Tally tally;
  uint64_t seed = 700;
  for (Path p : kPaths) combine_backward_case(tally, p, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuMoe, RefusesBadShapesAndNullBuffers) {
  const long launches = emu::launches;
  float* f = reinterpret_cast<float*>(16);  // never dereferenced: refused before any launch
  int32_t* i = reinterpret_cast<int32_t*>(16);
  double* d = reinterpret_cast<double*>(16);
  bf16* b = reinterpret_cast<bf16*>(16);
  const MoeRouter M = MoeRouter::TopkSoftmax, SB = MoeRouter::SigmoidBias;
  const cudaError_t bad = cudaErrorInvalidValue;
  // route: E, k in range (k <= E), a known mode, the bias for SigmoidBias, non-null buffers.
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, f, 4, 0, 1, M, false), bad);
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, f, 4, 8, 0, M, false), bad);
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, f, 4, 8, 9, M, false), bad);
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, f, -1, 8, 2, M, false), bad);
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, f, 4, 8, 2, MoeRouter(7), false), bad);
  EXPECT_EQ(ec::moe_route(i, f, f, f, f, nullptr, 4, 8, 2, SB, false), bad);
  EXPECT_EQ(ec::moe_route(i, f, nullptr, f, f, f, 4, 8, 2, M, false), bad);
  EXPECT_EQ(ec::moe_route(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, M, false),
            cudaSuccess);
  // router_backward: the same shape rules; aux_w may be null.
  EXPECT_EQ(ec::moe_router_backward(f, f, i, f, f, f, f, nullptr, 0, 4, 8, 9, M, false), bad);
  EXPECT_EQ(ec::moe_router_backward(f, f, i, f, f, f, nullptr, nullptr, 0, 4, 8, 2, M, false), bad);
  EXPECT_EQ(ec::moe_router_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, 0, 0, 8, 2, M, false),
            cudaSuccess);
  // router_sums: sums always (no tokens writes zeros), probs / lse with tokens.
  EXPECT_EQ(ec::moe_router_sums(nullptr, f, f, 4, 8), bad);
  EXPECT_EQ(ec::moe_router_sums(d, nullptr, f, 4, 8), bad);
  EXPECT_EQ(ec::moe_router_sums(d, f, f, 4, 0), bad);
  EXPECT_EQ(ec::moe_router_sums(d, f, f, -1, 8), bad);
  // dispatch: align >= 1, row ids within int32, counts / scratch always.
  EXPECT_EQ(ec::moe_dispatch(i, i, i, i, i, 4, 8, 2, 0), bad);
  EXPECT_EQ(ec::moe_dispatch(i, i, i, i, i, 4, 0, 2, 1), bad);
  EXPECT_EQ(ec::moe_dispatch(i, i, i, i, i, 4, 8, 0, 1), bad);
  EXPECT_EQ(ec::moe_dispatch(i, i, i, i, i, 1 << 30, 8, 2, 1), bad);  // 2^31 rows
  EXPECT_EQ(ec::moe_dispatch(i, i, nullptr, i, i, 4, 8, 2, 1), bad);
  EXPECT_EQ(ec::moe_dispatch(i, i, i, nullptr, i, 4, 8, 2, 1), bad);
  EXPECT_EQ(ec::moe_dispatch(i, i, i, i, nullptr, 4, 8, 2, 1), bad);
  EXPECT_EQ(ec::moe_dispatch(i, nullptr, i, i, i, 0, 8, 2, 16), bad);  // padding rows to write
  EXPECT_EQ(ec::moe_dispatch_scratch_ints(-1, 8, 2), 0);
  // gather / combine / combine_backward / scatter_add.
  EXPECT_EQ(ec::moe_gather(b, b, i, 4, 0), bad);
  EXPECT_EQ(ec::moe_gather(b, b, i, -1, 8), bad);
  EXPECT_EQ(ec::moe_gather(b, nullptr, i, 4, 8), bad);
  EXPECT_EQ(ec::moe_gather(nullptr, nullptr, nullptr, 0, 8), cudaSuccess);
  EXPECT_EQ(ec::moe_combine(b, b, f, i, 4, 8, 0, false), bad);
  EXPECT_EQ(ec::moe_combine(b, b, f, i, 4, 0, 2, false), bad);
  EXPECT_EQ(ec::moe_combine(b, b, nullptr, i, 4, 8, 2, true), bad);
  EXPECT_EQ(ec::moe_combine(nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true), cudaSuccess);
  EXPECT_EQ(ec::moe_combine_backward(b, f, b, b, f, i, -1, 8, 2), bad);
  EXPECT_EQ(ec::moe_combine_backward(b, nullptr, b, b, f, i, 4, 8, 2), bad);
  EXPECT_EQ(ec::moe_combine_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2),
            cudaSuccess);
  EXPECT_EQ(ec::moe_scatter_add(b, b, i, 4, 8, -2), bad);
  EXPECT_EQ(ec::moe_scatter_add(b, b, nullptr, 4, 8, 2), bad);
  EXPECT_EQ(ec::moe_scatter_add(nullptr, nullptr, nullptr, 0, 8, 2), cudaSuccess);
  EXPECT_EQ(emu::launches, launches);
}
