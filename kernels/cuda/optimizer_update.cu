// Fused optimizer updates of quantized weights (docs/eco.md). The per-element math is
// src/base/math/eco_update.h's, the code the CPU driver runs, so both backends write the same
// bits; only the schedule is CUDA's.
//
// PerRow, the register kernel (rows up to 8192 wide): a team of threads (whole warps) updates one
// row; each thread owns kQuads quads of 4 consecutive elements, quad j of lane t being the row's
// quad t + j * team (coalesced). Per thread:
//   1. load every owned quad's grad, m, v and codes (master under Master) into registers: float4
//      for fp32, 8 bytes for bf16 state, one 32-bit word for four 8-bit codes, 16 bits for four
//      INT4 codes (kVec; element-wise loads for ragged or misaligned buffers);
//   2. pass 1 on the registers (quantized_update_theta): v stored, m stored unless Eco changes it
//      again, master stored under Master; theta stays in a register, |theta| feeds the absmax;
//   3. the team's max (warp shuffles, one barrier, fmaxf: exact and order-free); every thread
//      derives the new scale;
//   4. pass 2 on the registers (quantized_update_code): codes stored, and m under Eco; lane 0
//      writes the row's scale, which every lane read before the barrier. A quad's 4 SR draws
//      are one Philox call (src/base/math/philox.h: element e takes word e & 3 of group e >> 2;
//      rows of cols % 4 != 0 cut groups, and their quads draw each group they touch).
// Bytes moved: exactly the minimum (fp32 AdamW + E4M3: 13 read + 9 written per element). Short
// rows share a block (one team per threadIdx.y); a block with fewer rows left than teams keeps
// its idle teams in the barrier. It runs at the rate of its instructions, not of its bytes: see
// tools/update_bench.cu, and scripts/dev/sass_count.sh for its instruction count per element.
//
// The two-pass kernel (Block128 tiles, rows wider than 8192; forced with GroupKernel::TwoPass):
// one block per group; pass 1 stores m, v, pass 2 re-reads codes, m and v and recomputes theta
// (bit-identical); each thread takes units of 4 consecutive elements of a row. PerTensor (INT4
// fine-tuning, or any format): one block cannot stream a whole tensor, so pass 1 runs over fixed
// chunks of units of 4 elements writing per-chunk absmax to scratch, one block reduces them into
// a TensorScaleSplit (old scale -> scratch[0], absmax -> scratch[1]), then pass 2 over the same
// chunks (block 0 writes the new scale). The split entry points run the two halves over a row
// range, with the ranges' maxima combined by the caller in between.
//
// Row ranges (RowRange): every kernel takes the range's rows (PerRow: its rows; Block128: its
// tile rows; PerTensor: its elements) and keys element i's SR draw by global index i + key, so
// the ranges of a partition give the whole-tensor bits.
//
// INT4 packs two codes per byte and store_code is a read-modify-write of the byte: every kernel
// gives each thread whole bytes (the register kernel: cols is even for INT4 rows, so every quad
// starts at an even element and holds 2 or 4 of them), so no two threads touch one byte.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "kernels/cuda/optimizer_update.cuh"

namespace eco::cuda {
namespace {

constexpr int kGroupThreads = 512;   // two-pass group kernel: blockDim.x a multiple of 32, <= 512
constexpr int kRowBlockThreads = 256;  // register kernel: rows share a block up to this many threads
constexpr int kTensorThreads = 256;  // per-tensor kernels
constexpr int64_t kTensorUnitsPerBlock = kTensorThreads * 4;  // units of 4 elements: 16 per thread
constexpr int kElementwiseThreads = 256;

// Max over the block (blockDim.x a multiple of 32); every thread gets the result. fmaxf ignores
// NaNs and is exact, so any order gives the CPU's sequential fmaxf. One call per kernel.
__device__ float block_max(float v) {
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? warp_max[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Max of v >= 0 over this thread's team: the blockDim.x threads (whole warps, at most 16) that
// share its threadIdx.y. Every thread of the block must call it (one barrier); every thread gets
// its team's max. One call per kernel. After the barrier each half-warp holds the team's warp
// maxima (lane l: warp l % 16's, 0 past the team's warps) and reduces them in 4 shuffles.
__device__ float team_max(float v) {
  static_assert(kRegisterTeamThreads <= 16 * 32, "a team's warp maxima fit a half-warp");
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int warps = int(blockDim.x) >> 5, first = int(threadIdx.y) * warps;
  const int lane = int(threadIdx.x & 31);
  if (lane == 0) warp_max[first + int(threadIdx.x >> 5)] = v;
  __syncthreads();
  float m = (lane & 15) < warps ? warp_max[first + (lane & 15)] : 0.0f;
  for (int o = 8; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  return m;
}

// ---- the register kernel -------------------------------------------------------------------

// Four consecutive states in one access: fp32 as a float4 (16-byte aligned), bf16 bits as two
// 32-bit words (8-byte aligned), element 0 in the low half.
__device__ void load_quad(const float* p, float* x) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  x[0] = t.x, x[1] = t.y, x[2] = t.z, x[3] = t.w;
}
__device__ void load_quad(const uint16_t* p, uint16_t* x) {
  const uint2 t = *reinterpret_cast<const uint2*>(p);
  x[0] = uint16_t(t.x), x[1] = uint16_t(t.x >> 16), x[2] = uint16_t(t.y), x[3] = uint16_t(t.y >> 16);
}
__device__ void store_quad(float* p, const float* x) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
}
__device__ void store_quad(uint16_t* p, const uint16_t* x) {
  *reinterpret_cast<uint2*>(p) =
      make_uint2(uint32_t(x[0]) | uint32_t(x[1]) << 16, uint32_t(x[2]) | uint32_t(x[3]) << 16);
}

// A quad's codes in one word: element e at bits [e * b, e * b + b), b = 8, or 4 for INT4 (the
// quad starts at an even element, so its codes are bytes i0 / 2 and i0 / 2 + 1, low nibble
// first, as qformat.h packs them).
__device__ uint8_t quad_code(uint32_t word, int e, bool int4) {
  return int4 ? uint8_t((word >> (4 * e)) & 0xFu) : uint8_t(word >> (8 * e));
}

// The codes of `count` elements from element i0 (even for INT4). Vector: count == 4 and the
// word aligned (4 bytes, INT4: 2). Element-wise loops are unrolled with predicates, so that the
// register arrays they fill are indexed by constants (else they go to local memory).
template <bool kVec>
__device__ uint32_t load_quad_codes(const uint8_t* codes, int64_t i0, int count, bool int4) {
  if constexpr (kVec) {
    return int4 ? uint32_t(*reinterpret_cast<const uint16_t*>(codes + i0 / 2))
                : *reinterpret_cast<const uint32_t*>(codes + i0);
  } else {
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (int4 ? e < 2 && 2 * e < count : e < count)
        word |= uint32_t(int4 ? codes[i0 / 2 + e] : codes[i0 + e]) << (8 * e);
    }
    return word;
  }
}

template <bool kVec>
__device__ void store_quad_codes(uint8_t* codes, int64_t i0, int count, bool int4, uint32_t word) {
  if constexpr (kVec) {
    if (int4) *reinterpret_cast<uint16_t*>(codes + i0 / 2) = uint16_t(word);
    else *reinterpret_cast<uint32_t*>(codes + i0) = word;
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (int4 ? e < 2 && 2 * e < count : e < count)
        (int4 ? codes[i0 / 2 + e] : codes[i0 + e]) = uint8_t(word >> (8 * e));
    }
  }
}

// Four (or `count`) consecutive values of one buffer into x[0..count).
template <bool kVec, class T>
__device__ void load_values(const T* p, int64_t i0, int count, T* x) {
  if constexpr (kVec) {
    load_quad(p + i0, x);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e < count) x[e] = p[i0 + e];
    }
  }
}
template <bool kVec, class T>
__device__ void store_values(T* p, int64_t i0, int count, const T* x) {
  if constexpr (kVec) {
    store_quad(p + i0, x);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e < count) p[i0 + e] = x[e];
    }
  }
}

// A thread's quads in its row (or no elements for a team past the last row): quad j is the
// row's quad lane + j * team_threads of ceil(cols / 4), the last one ragged when cols % 4 != 0.
// Column math in 32 bits (cols < 2^31, checked by the host), one 64-bit add per quad.
struct QuadMap {
  int64_t row_start;  // the row's first element: row * cols
  int cols;           // the row's length, 0 for a team past the last row
  int lane, team_threads;

  // Quad j's first element (*i0) and its number of elements (0 past the row's end).
  __device__ int locate(int j, int64_t* i0) const {
    const int c = 4 * (lane + j * team_threads);
    *i0 = row_start + c;
    const int left = cols - c;
    return left <= 0 ? 0 : left < 4 ? left : 4;
  }
};

// Specialization. Every element's code is unrolled kQuads * 4 times; runtime switches on the
// format (four codecs), the rounding and the policy put each element's math in its own branches,
// which multiplies the code the instruction cache must hold and keeps the compiler from computing
// the step's uniform terms (1 - lr * wd, the injection's coefficient, ...) once per thread. So the
// hot case, whole quads of E4M3 codes, has kernels with the format, the rounding and (for Eco)
// the policy fixed at compile time, and whole quads are computed unconditionally (a quad past
// the row's end works on zeros and stores nothing), so the kernel adds no per-element branches
// of its own to the shared math's. kAny: read from the arguments at run time (the other
// formats, ragged or misaligned rows, Naive / Master, Eco with lr == 0).
constexpr int kAny = -1;

// Whether the rule's Eco injection runs this step (eco_update.h skips it when lr == 0 or
// beta == 0: the rule's injects()). The Eco-specialized kernels run only where it
// does (the host checks): each states it once up front, so that the compiler drops the
// per-element test.
template <class Rule>
__host__ __device__ bool injection_skipped(const Rule& r) { return !r.injects(); }

// AdamW's bias corrections made a compile-time constant (AdamWRule::unbiased(): bc1 == bc2 == 1
// skips two divisions per element; rules with Rule::kBiasCorrected): true only in the kernels
// the host launches after checking it; false everywhere else, which divides by bc1 and bc2 even
// when they are 1, with the same bits, so that no kernel carries both paths for every element.
template <bool kUnbiased, class Rule>
__device__ void fix_unbiased(Rule& r) {
  if constexpr (Rule::kBiasCorrected) r.fix_unbiased(kUnbiased);
}
template <class Rule>
bool unbiased(const Rule& r) {
  if constexpr (Rule::kBiasCorrected) return r.unbiased();
  else return false;
}

// grid (ceil((row_end - row_begin) / teams)), block (team_threads, teams): team threadIdx.y of
// block x updates row row_begin + x * teams + threadIdx.y (PerRow scales), lane threadIdx.x
// owning kQuads quads (QuadMap); element i draws as global index i + key (RowRange).
// team_threads: a multiple of 32, at most kRegisterTeamThreads, team_threads * kQuads >= the
// row's quads; kVec: cols % 4 == 0, key % 4 == 0 and every buffer aligned for its quad access; kFormat,
// kRounding, kPolicy: kAny or the value the arguments hold; kUnbiased: see fix_unbiased.
template <class Rule, class S, int kQuads, bool kVec, int kFormat, int kRounding, int kPolicy,
          bool kUnbiased>
__global__ void __launch_bounds__(kRegisterTeamThreads)
    quantized_update_registers_kernel(Rule rule, FormatQuantizer q_arg, UpdatePolicy policy_arg,
                                      QuantizedUpdateBuffers<S, float> b, float* scales,
                                      int64_t row_begin, int64_t row_end, int64_t cols,
                                      int64_t key) {
  constexpr int kElems = 4 * kQuads;
  fix_unbiased<kUnbiased>(rule);
  FormatQuantizer q = q_arg;
  if constexpr (kFormat != kAny) q.format = QFormat(kFormat);
  if constexpr (kRounding != kAny) q.rounding = Rounding(kRounding);
  const UpdatePolicy policy = kPolicy != kAny ? UpdatePolicy(kPolicy) : policy_arg;
  if constexpr (kPolicy == int(UpdatePolicy::Eco)) {
    if (injection_skipped(rule)) {  // the host never launches this (see above)
      __trap();
      __builtin_unreachable();
    }
  }

  const int64_t k = row_begin + int64_t(blockIdx.x) * blockDim.y + threadIdx.y;  // the row
  const bool active = k < row_end;
  const QuadMap map{active ? k * cols : 0, active ? int(cols) : 0, int(threadIdx.x),
                    int(blockDim.x)};
  const bool int4 = q.format == QFormat::INT4, master = policy == UpdatePolicy::Master;
  const float old_scale = active ? scales[k] : 0.0f;  // read before team_max's barrier

  // Element e of a quad holding `count` elements takes part: kVec quads are whole or empty, and
  // empty ones are computed on zeros anyway (see above); ragged quads skip their missing tail.
  auto skip = [](int count, int e) { return kVec ? false : e >= count; };

  // 1. Every load first, so that all of them are in flight together.
  float grad[kElems] = {}, w[kElems] = {};
  S m[kElems] = {}, v[kElems] = {};
  uint32_t words[kQuads] = {};
#pragma unroll
  for (int j = 0; j < kQuads; ++j) {
    int64_t i0;
    const int count = map.locate(j, &i0);
    if (count == 0) continue;
    load_values<kVec>(b.grad, i0, count, grad + 4 * j);
    load_values<kVec>(b.m, i0, count, m + 4 * j);
    if constexpr (Rule::kHasV) load_values<kVec>(b.v, i0, count, v + 4 * j);
    if (master) load_values<kVec>(b.master, i0, count, w + 4 * j);
    else words[j] = load_quad_codes<kVec>(b.codes, i0, count, int4);
  }

  // 2. Pass 1: the moments, theta; the final v (and m unless Eco injects into it) stored.
  float theta[kElems];
  float absmax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuads; ++j) {
    int64_t i0;
    const int count = map.locate(j, &i0);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int x = 4 * j + e;
      if (skip(count, e)) continue;
      const float old_w = master ? w[x] : q.decode(quad_code(words[j], e, int4), old_scale);
      theta[x] = quantized_update_theta(rule, grad[x], old_w, m[x], v[x]);
      absmax = fmaxf(absmax, count != 0 ? fabsf(theta[x]) : 0.0f);
    }
    if (count == 0) continue;
    if constexpr (Rule::kHasV) store_values<kVec>(b.v, i0, count, v + 4 * j);
    if (policy != UpdatePolicy::Eco) store_values<kVec>(b.m, i0, count, m + 4 * j);
    if (master) store_values<kVec>(b.master, i0, count, theta + 4 * j);
  }

  // 3. The row's new scale.
  const float new_scale = q.scale_for(team_max(absmax));

  // 4. Pass 2: the codes (and the injected m under Eco). Branching once on the team-uniform
  //    new_scale == 0 (an all-zero group) lets the compiler drop quantize_value's per-element
  //    test of it, as for the injection above. SR draws: a kVec quad starts at a multiple of 4
  //    (cols % 4 == 0), so it is exactly one Philox group (one call); a ragged quad may
  //    straddle two groups (rows of cols % 4 != 0), and the cursor draws each it touches.
  auto pass2 = [&](float scale) {
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
      int64_t i0;
      const int count = map.locate(j, &i0);
      S* mq = m + 4 * j;  // pass 1's stored moments of the quad
      const S* vq = v + 4 * j;
      Philox4x32 quad_draws{};
      GroupDrawCursor<FormatQuantizer> draw{q};
      if constexpr (kVec) quad_draws = q.draws(uint64_t(i0 + key) >> 2);
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (skip(count, e)) continue;
        const uint32_t bits = kVec ? quad_draws.v[e] : draw(uint64_t(i0 + e + key));
        const uint8_t code =
            quantized_update_code(rule, q, policy, theta[4 * j + e], mq[e], vq[e], scale, bits);
        word |= uint32_t(code) << (int4 ? 4 * e : 8 * e);
      }
      if (count == 0) continue;
      store_quad_codes<kVec>(b.codes, i0, count, int4, word);
      if (policy == UpdatePolicy::Eco) store_values<kVec>(b.m, i0, count, mq);
    }
  };
  if (new_scale == 0.0f) pass2(0.0f);
  else pass2(new_scale);
  if (active && map.lane == 0) scales[k] = new_scale;  // no lane reads scales[k] after the barrier
}

// ---- the two-pass kernels ------------------------------------------------------------------

// Calls f(i) for this thread's elements of the group `span`, in a fixed order: units of 4
// consecutive columns of a row (the last one of a row may be shorter), unit u to thread
// u % blockDim.x, each unit's elements in increasing order. Whole units keep the packed INT4
// bytes (cols even, so units start at even elements) and, where rows start at multiples of 4,
// the SR draw groups with one thread.
template <bool kRowGroups, class F>
__device__ void for_each_group_element(const GroupSpan& span, F&& f) {
  const int units_per_row = int((span.cols + 3) / 4);
  const int units = int(span.rows) * units_per_row;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int r = kRowGroups ? 0 : u / units_per_row;
    const int c0 = (u - r * units_per_row) * 4;
    for (int e = 0; e < 4 && c0 + e < span.cols; ++e) f(span.index(r, c0 + e));
  }
}

// grid (number of groups from group k0), block (multiple of 32, <= kGroupThreads; two blocks per
// SM, so one block's pass 1 overlaps the other's barrier and pass 2); block x updates group
// k0 + x. kRowGroups: PerRow groups, else Block128 tiles. Element i draws as global index
// i + key.
template <class Rule, class S, bool kRowGroups>
__global__ void __launch_bounds__(kGroupThreads, 2)
    quantized_update_groups_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                                   QuantizedUpdateBuffers<S, float> b, float* scales, int64_t rows,
                                   int64_t cols, int64_t k0, int64_t key) {
  fix_unbiased<false>(rule);
  const int64_t k = k0 + blockIdx.x;
  const GroupSpan span =
      scale_group_span(kRowGroups ? Granularity::PerRow : Granularity::Block128, rows, cols, k);
  const float old_scale = scales[k];  // every thread, before block_max's barrier

  float absmax = 0.0f;
  for_each_group_element<kRowGroups>(span, [&](int64_t i) {
    absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
  });
  const float new_scale = q.scale_for(block_max(absmax));
  GroupDrawCursor<FormatQuantizer> draw{q};
  for_each_group_element<kRowGroups>(span, [&](int64_t i) {
    quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, draw(uint64_t(i + key)));
  });
  if (threadIdx.x == 0) scales[k] = new_scale;  // no thread reads scales[k] after the barrier
}

// Per-tensor group over elements [first, last), chunk blockIdx.x: units [u0 + blockIdx.x *
// kTensorUnitsPerBlock, +kTensorUnitsPerBlock) of 4 consecutive elements from u0 = first / 4
// (unit u: elements 4u .. 4u + 3 cut to the range; whole INT4 bytes of the range, the SR draw
// group u), each unit's elements in increasing order.
template <class F>
__device__ void for_each_chunk_element(int64_t first, int64_t last, F&& f) {
  const int64_t units = (last + 3) / 4;
  const int64_t u0 = first / 4 + int64_t(blockIdx.x) * kTensorUnitsPerBlock;
  const int64_t u1 = u0 + kTensorUnitsPerBlock < units ? u0 + kTensorUnitsPerBlock : units;
  for (int64_t u = u0 + threadIdx.x; u < u1; u += kTensorThreads)
    for (int e = 0; e < 4; ++e) {
      const int64_t i = 4 * u + e;
      if (i >= first && i < last) f(i);
    }
}

// Per-tensor pass 1: grid (tensor_chunks(first, last)), block (kTensorThreads). chunk_max
// (chunks) <- absmax |theta|.
template <class Rule, class S>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_pass1_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                               QuantizedUpdateBuffers<S, float> b, const float* scales,
                               float* chunk_max, int64_t first, int64_t last) {
  fix_unbiased<false>(rule);
  const float old_scale = scales[0];
  float absmax = 0.0f;
  for_each_chunk_element(first, last, [&](int64_t i) {
    absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
  });
  absmax = block_max(absmax);
  if (threadIdx.x == 0) chunk_max[blockIdx.x] = absmax;
}

// One block (kTensorThreads): split[0] <- the old scale, split[1] <- max of chunk_max (a
// TensorScaleSplit in device memory).
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_absmax_kernel(const float* scales, const float* chunk_max, int64_t chunks,
                                float* split) {
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += kTensorThreads) m = fmaxf(m, chunk_max[c]);
  m = block_max(m);
  if (threadIdx.x == 0) {
    split[0] = scales[0];
    split[1] = m;
  }
}

// Per-tensor pass 2: grid (tensor_chunks(first, last)), block (kTensorThreads); split: the old
// scale and the combined absmax (device memory); block 0 writes the new scale (no block reads
// scales[0] here). Element i draws as global index i + key.
template <class Rule, class S>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_pass2_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                               QuantizedUpdateBuffers<S, float> b, float* scales,
                               const float* split, int64_t first, int64_t last, int64_t key) {
  fix_unbiased<false>(rule);
  const float old_scale = split[0], new_scale = q.scale_for(split[1]);
  GroupDrawCursor<FormatQuantizer> draw{q};
  for_each_chunk_element(first, last, [&](int64_t i) {
    quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, draw(uint64_t(i + key)));
  });
  if (blockIdx.x == 0 && threadIdx.x == 0) scales[0] = new_scale;
}

int64_t tensor_chunks(int64_t first, int64_t last) {
  const int64_t units = first < last ? (last + 3) / 4 - first / 4 : 0;
  return (units + kTensorUnitsPerBlock - 1) / kTensorUnitsPerBlock;
}

// About 16 elements per thread, 2..16 warps: an 8192-wide row gets 512 threads and two rows are
// in flight per SM (~47 MB over 132 SMs at 178 KB a row), so pass 2's re-reads of m, v and the
// codes should still find them in L2.
int group_threads(int64_t elements) {
  const int64_t warps = (elements + 16 * 32 - 1) / (16 * 32);
  return int(warps < 2 ? 2 : warps > kGroupThreads / 32 ? kGroupThreads / 32 : warps) * 32;
}

// ---- host: choosing and launching ----------------------------------------------------------

// A register-kernel launch: quads per thread, teams of team_threads, teams per block.
struct RegisterLaunch {
  int quads = 0;  // 0: the register kernel cannot run these groups
  int team_threads = 0, teams_per_block = 0;
};

int forced_quads(GroupKernel k) {
  switch (k) {
    case GroupKernel::Registers4: return 1;
    case GroupKernel::Registers8: return 2;
    case GroupKernel::Registers16: return 4;
    default: return 0;
  }
}

// PerRow only (rows of ceil(cols / 4) quads). Auto: the fewest elements per thread whose team
// (at most kRegisterTeamThreads) holds a row: 4 up to 2048 wide, 8 up to 4096, 16 up to 8192;
// wider rows and Block128 tiles go to the two-pass kernel. The kernel is bound by its
// instructions, not its bytes (see the header of tools/update_bench.cu), so what pays is warps
// in flight to hide each element's long dependent chains (divisions, the Philox rounds); fewer
// elements per thread need fewer registers. On an H200 at GPT-2's 768-wide rows, 8 per thread
// took 4-14% longer than 4, and 16 per thread 60-80% longer. A 32-per-thread variant (m, v
// reloaded from L1/L2 in pass 2 to fit the registers; 128x128 tiles, rows up to 16384) took
// 26-46% longer than the two-pass kernel on 8192x8192 per row and per tile and on 1024x16384,
// so it was dropped. Short rows share a block (up to kRowBlockThreads threads).
RegisterLaunch register_launch(GroupKernel kernel, Granularity g, int64_t cols) {
  RegisterLaunch l;
  if (g != Granularity::PerRow) return l;
  const int64_t row_quads = (cols + 3) / 4;
  for (int quads : {1, 2, 4}) {
    if (kernel != GroupKernel::Auto && quads != forced_quads(kernel)) continue;
    const int64_t threads = (row_quads + quads - 1) / quads;
    const int64_t team = (threads + 31) / 32 * 32;  // whole warps
    if (team > kRegisterTeamThreads) continue;
    l.quads = quads;
    l.team_threads = int(team);
    l.teams_per_block = l.team_threads < kRowBlockThreads ? kRowBlockThreads / l.team_threads : 1;
    break;
  }
  return l;
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether every buffer allows the register kernel's quad accesses (and the SR key offset keeps
// a quad one Philox group).
template <class S>
bool quad_aligned(const QuantizedUpdateBuffers<S, float>& b, UpdatePolicy policy, QFormat f,
                  int64_t cols, bool has_v, int64_t key) {
  return cols % 4 == 0 && key % 4 == 0 && aligned(b.grad, 16) && aligned(b.m, 4 * sizeof(S)) &&
         (!has_v || aligned(b.v, 4 * sizeof(S))) &&
         (policy != UpdatePolicy::Master || aligned(b.master, 16)) &&
         aligned(b.codes, f == QFormat::INT4 ? 2 : 4);
}

// The rows [begin, end) of an update and its SR key offset, resolved from a RowRange.
struct Rows {
  int64_t begin, end, key;
};

template <class Rule, class S, int kQuads>
void launch_registers(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                      const QuantizedUpdateBuffers<S, float>& b, float* scales, const Rows& r,
                      int64_t cols, const RegisterLaunch& l, cudaStream_t s) {
  const unsigned blocks = unsigned((r.end - r.begin + l.teams_per_block - 1) / l.teams_per_block);
  const dim3 threads(unsigned(l.team_threads), unsigned(l.teams_per_block));
  auto run = [&](auto kernel) {
    kernel<<<blocks, threads, 0, s>>>(rule, q, policy, b, scales, r.begin, r.end, cols, r.key);
  };
  constexpr int kE4m3 = int(QFormat::E4M3), kSr = int(Rounding::SR), kRtn = int(Rounding::RTN);
  constexpr int kEco = int(UpdatePolicy::Eco);
  const bool eco = policy == UpdatePolicy::Eco && !injection_skipped(rule);
  const bool sr = q.rounding == Rounding::SR;
  // The Eco E4M3 kernels also come without AdamW's bias-correction divisions, for the steps
  // where they are 1 (most of a run: AdamWRule::unbiased()).
  constexpr bool kBc = Rule::kBiasCorrected;
  const bool skip_bc = kBc && unbiased(rule);
  if (!quad_aligned(b, policy, q.format, cols, Rule::kHasV, r.key)) {
    run(quantized_update_registers_kernel<Rule, S, kQuads, false, kAny, kAny, kAny, false>);
  } else if (q.format != QFormat::E4M3) {
    run(quantized_update_registers_kernel<Rule, S, kQuads, true, kAny, kAny, kAny, false>);
  } else {
    auto e4m3 = [&](auto rounding) {
      constexpr int kR = decltype(rounding)::value;
      if (eco && skip_bc)
        run(quantized_update_registers_kernel<Rule, S, kQuads, true, kE4m3, kR, kEco, kBc>);
      else if (eco)
        run(quantized_update_registers_kernel<Rule, S, kQuads, true, kE4m3, kR, kEco, false>);
      else
        run(quantized_update_registers_kernel<Rule, S, kQuads, true, kE4m3, kR, kAny, false>);
    };
    if (sr) e4m3(std::integral_constant<int, kSr>{});
    else e4m3(std::integral_constant<int, kRtn>{});
  }
}

// The checks every entry point shares (see the header); resolves the range into *r.
template <class Rule, class S>
cudaError_t check_update(UpdatePolicy policy, const QuantizedUpdateBuffers<S, float>& b,
                         const float* scales, int64_t rows, int64_t cols, const RowRange& range,
                         Rows* r) {
  if (rows < 0 || cols < 1 || rows > int64_t(INT32_MAX) || cols > int64_t(INT32_MAX))
    return cudaErrorInvalidValue;
  *r = {range.begin, range.end_row(rows), range.key_offset(cols)};
  if (r->begin < 0 || r->begin > r->end || r->end > rows || r->key + r->begin * cols < 0)
    return cudaErrorInvalidValue;
  if (r->begin == r->end) return cudaSuccess;
  if (!b.codes || !b.grad || !b.m || !scales) return cudaErrorInvalidValue;
  if (Rule::kHasV && !b.v) return cudaErrorInvalidValue;
  if (policy == UpdatePolicy::Master && !b.master) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// PerTensor pass 1 over r: scratch[0..1] <- the split, chunk maxima at scratch + 2.
template <class Rule, class S>
cudaError_t launch_tensor_absmax(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                                 const QuantizedUpdateBuffers<S, float>& b, const float* scales,
                                 int64_t cols, const Rows& r, float* scratch, cudaStream_t s) {
  const int64_t first = r.begin * cols, last = r.end * cols, chunks = tensor_chunks(first, last);
  if (chunks > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  if (chunks > 0) {
    tensor_update_pass1_kernel<Rule, S>
        <<<unsigned(chunks), kTensorThreads, 0, s>>>(rule, q, policy, b, scales, scratch + 2, first, last);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  tensor_update_absmax_kernel<<<1, kTensorThreads, 0, s>>>(scales, scratch + 2, chunks, scratch);
  return cudaGetLastError();
}

// PerTensor pass 2 over r with the split at `split` (device memory).
template <class Rule, class S>
cudaError_t launch_tensor_finish(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                                 const QuantizedUpdateBuffers<S, float>& b, float* scales,
                                 int64_t cols, const Rows& r, const float* split, cudaStream_t s) {
  const int64_t first = r.begin * cols, last = r.end * cols, chunks = tensor_chunks(first, last);
  if (chunks > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  if (chunks == 0) return cudaSuccess;
  tensor_update_pass2_kernel<Rule, S>
      <<<unsigned(chunks), kTensorThreads, 0, s>>>(rule, q, policy, b, scales, split, first, last, r.key);
  return cudaGetLastError();
}

template <class Rule, class S>
cudaError_t launch_quantized_update(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                                    const QuantizedUpdateBuffers<S, float>& b, float* scales,
                                    int64_t rows, int64_t cols, Granularity granularity,
                                    float* scratch, cudaStream_t s, GroupKernel kernel,
                                    const RowRange& range) {
  Rows r{};
  if (const cudaError_t e = check_update<Rule>(policy, b, scales, rows, cols, range, &r); e != cudaSuccess)
    return e;
  if (!group_kernel_fits(kernel, granularity, rows, cols)) return cudaErrorInvalidValue;
  if (granularity == Granularity::PerTensor && (r.begin != 0 || r.end != rows))
    return cudaErrorInvalidValue;  // ranges of a per-tensor scale: the split update
  if (granularity == Granularity::Block128 &&
      (r.begin % kScaleBlock != 0 || (r.end % kScaleBlock != 0 && r.end != rows)))
    return cudaErrorInvalidValue;
  if (r.begin == r.end) return cudaSuccess;
  const int per = q.format == QFormat::INT4 ? 2 : 1;
  if (granularity != Granularity::PerTensor) {
    if (cols % per != 0) return cudaErrorInvalidValue;
    const int64_t tiles_per_row = (cols + kScaleBlock - 1) / kScaleBlock;
    const int64_t k0 = granularity == Granularity::PerRow ? r.begin : r.begin / kScaleBlock * tiles_per_row;
    const int64_t k1 = granularity == Granularity::PerRow
                           ? r.end
                           : (r.end + kScaleBlock - 1) / kScaleBlock * tiles_per_row;
    if (k1 - k0 > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
    const RegisterLaunch l =
        kernel == GroupKernel::TwoPass ? RegisterLaunch{} : register_launch(kernel, granularity, cols);
    if (l.quads == 0) {
      const int64_t elements = granularity == Granularity::PerRow
                                   ? cols
                                   : (rows < kScaleBlock ? rows : kScaleBlock) *
                                         (cols < kScaleBlock ? cols : kScaleBlock);
      const int threads = group_threads(elements);
      if (granularity == Granularity::PerRow)
        quantized_update_groups_kernel<Rule, S, true>
            <<<unsigned(k1 - k0), threads, 0, s>>>(rule, q, policy, b, scales, rows, cols, k0, r.key);
      else
        quantized_update_groups_kernel<Rule, S, false>
            <<<unsigned(k1 - k0), threads, 0, s>>>(rule, q, policy, b, scales, rows, cols, k0, r.key);
      return cudaGetLastError();
    }
    if (l.quads == 1) launch_registers<Rule, S, 1>(rule, q, policy, b, scales, r, cols, l, s);
    else if (l.quads == 2) launch_registers<Rule, S, 2>(rule, q, policy, b, scales, r, cols, l, s);
    else launch_registers<Rule, S, 4>(rule, q, policy, b, scales, r, cols, l, s);
    return cudaGetLastError();
  }
  if (!scratch) return cudaErrorInvalidValue;
  if (const cudaError_t e = launch_tensor_absmax(rule, q, policy, b, scales, cols, r, scratch, s);
      e != cudaSuccess)
    return e;
  return launch_tensor_finish(rule, q, policy, b, scales, cols, r, scratch, s);
}

template <class Rule, class S>
cudaError_t tensor_absmax(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                          const QuantizedUpdateBuffers<S, float>& b, const float* scales,
                          int64_t rows, int64_t cols, const RowRange& range, float* scratch,
                          cudaStream_t s) {
  Rows r{};
  if (const cudaError_t e = check_update<Rule>(policy, b, scales, rows, cols, range, &r); e != cudaSuccess)
    return e;
  if (!scratch || !scales) return cudaErrorInvalidValue;
  return launch_tensor_absmax(rule, q, policy, b, scales, cols, r, scratch, s);
}

template <class Rule, class S>
cudaError_t tensor_finish(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                          const QuantizedUpdateBuffers<S, float>& b, float* scales, int64_t rows,
                          int64_t cols, const RowRange& range, const float* split,
                          cudaStream_t s) {
  Rows r{};
  if (const cudaError_t e = check_update<Rule>(policy, b, scales, rows, cols, range, &r); e != cudaSuccess)
    return e;
  if (!split || !scales) return cudaErrorInvalidValue;
  return launch_tensor_finish(rule, q, policy, b, scales, cols, r, split, s);
}

// ---- plain fp32 steps ----------------------------------------------------------------------

// Thread t updates elements [4t, 4t + 4) (kVec: one float4 of each buffer), then the tail
// n - n % 4 .. n - 1 is done by the first n % 4 threads. The rule's plain step
// (optimizer_rules.h), as the CPU loop: the same bits.
template <class Rule, bool kVec>
__global__ void __launch_bounds__(kElementwiseThreads)
    fp32_plain_kernel(float* __restrict__ param, const float* __restrict__ grad,
                      float* __restrict__ m, float* __restrict__ v, int64_t n, Rule rule) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float v_unused = 0.0f;
  auto step = [&](int64_t i) {
    param[i] = rule.step(param[i], grad[i], m[i], Rule::kHasV ? v[i] : v_unused);
  };
  if (t < n / 4) {
    if constexpr (kVec) {
      float4 p = reinterpret_cast<float4*>(param)[t], mm = reinterpret_cast<float4*>(m)[t];
      float4 vv = Rule::kHasV ? reinterpret_cast<float4*>(v)[t] : float4{};
      const float4 g = reinterpret_cast<const float4*>(grad)[t];
      p.x = rule.step(p.x, g.x, mm.x, vv.x);
      p.y = rule.step(p.y, g.y, mm.y, vv.y);
      p.z = rule.step(p.z, g.z, mm.z, vv.z);
      p.w = rule.step(p.w, g.w, mm.w, vv.w);
      reinterpret_cast<float4*>(param)[t] = p;
      reinterpret_cast<float4*>(m)[t] = mm;
      if constexpr (Rule::kHasV) reinterpret_cast<float4*>(v)[t] = vv;
    } else {
      for (int64_t i = 4 * t; i < 4 * t + 4; ++i) step(i);
    }
  }
  if (t < n % 4) step(n - n % 4 + t);
}

bool aligned16(const void* p) { return aligned(p, 16); }

unsigned elementwise_blocks(int64_t n) {
  const int64_t threads = n / 4 > 3 ? n / 4 : 3;  // >= n % 4 threads for the tail
  return unsigned((threads + kElementwiseThreads - 1) / kElementwiseThreads);
}

template <class Rule>
cudaError_t launch_plain(float* param, const float* grad, float* m, float* v, int64_t n,
                         const Rule& rule, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!param || !grad || !m || (Rule::kHasV && !v)) return cudaErrorInvalidValue;
  if (aligned16(param) && aligned16(grad) && aligned16(m) && (!Rule::kHasV || aligned16(v)))
    fp32_plain_kernel<Rule, true>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, v, n, rule);
  else
    fp32_plain_kernel<Rule, false>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, v, n, rule);
  return cudaGetLastError();
}

}  // namespace

int64_t quantized_update_scratch_floats(int64_t rows, int64_t cols, QFormat /*format*/,
                                        Granularity granularity) {
  if (granularity != Granularity::PerTensor || rows <= 0 || cols <= 0) return 0;
  return 2 + tensor_chunks(0, rows * cols);
}

bool group_kernel_fits(GroupKernel kernel, Granularity granularity, int64_t rows, int64_t cols) {
  if (kernel == GroupKernel::Auto) return true;
  if (granularity == Granularity::PerTensor) return false;
  return kernel == GroupKernel::TwoPass || rows <= 0 || cols <= 0 ||
         register_launch(kernel, granularity, cols).quads != 0;
}

// The entry points build the step's rule (with_rule) and run the launchers above on it.
template <class S>
cudaError_t quantized_update(const RuleStep& step, const FormatQuantizer& q, UpdatePolicy policy,
                             const QuantizedUpdateBuffers<S>& b, float* scales, int64_t rows,
                             int64_t cols, Granularity granularity, float* scratch,
                             cudaStream_t s, GroupKernel kernel, const RowRange& range) {
  return with_rule(step, [&](const auto& rule) {
    return launch_quantized_update(rule, q, policy, b, scales, rows, cols, granularity, scratch,
                                   s, kernel, range);
  });
}
template <class S>
cudaError_t quantized_update_tensor_absmax(const RuleStep& step, const FormatQuantizer& q,
                                           UpdatePolicy policy,
                                           const QuantizedUpdateBuffers<S>& b,
                                           const float* scales, int64_t rows, int64_t cols,
                                           const RowRange& range, float* scratch,
                                           cudaStream_t s) {
  return with_rule(step, [&](const auto& rule) {
    return tensor_absmax(rule, q, policy, b, scales, rows, cols, range, scratch, s);
  });
}
template <class S>
cudaError_t quantized_update_tensor_finish(const RuleStep& step, const FormatQuantizer& q,
                                           UpdatePolicy policy,
                                           const QuantizedUpdateBuffers<S>& b, float* scales,
                                           int64_t rows, int64_t cols, const RowRange& range,
                                           const float* split, cudaStream_t s) {
  return with_rule(step, [&](const auto& rule) {
    return tensor_finish(rule, q, policy, b, scales, rows, cols, range, split, s);
  });
}

#define ECO_INSTANTIATE_QUANTIZED_UPDATE(S)                                                      \
  template cudaError_t quantized_update<S>(const RuleStep&, const FormatQuantizer&, UpdatePolicy, \
                                           const QuantizedUpdateBuffers<S>&, float*, int64_t,     \
                                           int64_t, Granularity, float*, cudaStream_t,            \
                                           GroupKernel, const RowRange&);                         \
  template cudaError_t quantized_update_tensor_absmax<S>(                                        \
      const RuleStep&, const FormatQuantizer&, UpdatePolicy, const QuantizedUpdateBuffers<S>&,    \
      const float*, int64_t, int64_t, const RowRange&, float*, cudaStream_t);                    \
  template cudaError_t quantized_update_tensor_finish<S>(                                        \
      const RuleStep&, const FormatQuantizer&, UpdatePolicy, const QuantizedUpdateBuffers<S>&,    \
      float*, int64_t, int64_t, const RowRange&, const float*, cudaStream_t);
ECO_INSTANTIATE_QUANTIZED_UPDATE(float)
ECO_INSTANTIATE_QUANTIZED_UPDATE(uint16_t)
#undef ECO_INSTANTIATE_QUANTIZED_UPDATE

cudaError_t fp32_plain_update(float* param, const float* grad, float* m, float* v, int64_t n,
                              const RuleStep& step, cudaStream_t s) {
  return with_rule(step, [&](const auto& rule) {
    return launch_plain(param, grad, m, std::decay_t<decltype(rule)>::kHasV ? v : nullptr, n,
                        rule, s);
  });
}

}  // namespace eco::cuda
