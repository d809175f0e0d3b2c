// The MoE kernels of moe.cuh (docs/moe.md). Every result is deterministic: no atomics,
// each sum in a fixed order, every work split a function of the shapes only.
//  - moe_route, moe_router_backward: a thread per token running src/base/math/moe_router.h's
//    per-token math in fp32 on its rows in global memory: the CPU twin's own code.
//  - moe_router_sums: a block per output (the E prob columns, then lse^2, then the entropy, a
//    token's whole moe_entropy per thread); thread i sums tokens i, i + kSumThreads, ... in
//    double, then a fixed shared-memory tree.
//  - moe_dispatch: a stable counting sort of the N k slots by expert over chunks of consecutive
//    slots (their number a function of N k and E): per-chunk histograms, expert-major
//    cnt[e * chunks + c]; a block per expert turns its row of cnt into the exclusive scan across
//    chunks and writes counts[e]; one block scans the aligned segment sizes into offsets and marks
//    the padding rows (and every row past the last segment) with token -1; then each chunk's
//    thread walks its slots in order again, slot s of expert e taking row offsets[e] + the
//    chunk's next row of e. Integer sums: the CPU twin's rows exactly.
//  - gather, combine, scatter_add (the combine kernel with every weight 1): a thread per (row or
//    token, 8 channels), 16-byte accesses when C % 8 == 0 and the row buffers are 16-byte aligned
//    (elementwise.cuh's chunks), else element by element; fp32 sums over j in order from 0, added
//    to the output once, one rounding: the CPU twin's fp32 arithmetic on the widened bf16 inputs.
//    The gather copies bits.
//  - combine_backward: a warp per slot; lane l takes chunks l, l + 32, ... of the row: dy =
//    bf16(g * dout) (the twin's bits) and the dot <dout, y> in fp32 over its chunks, then a fixed
//    butterfly (the twin sums in channel order: equal to fp32 reassociation).
// Launch assumptions (checked by the launchers, cudaErrorInvalidValue otherwise): sizes >= 0,
// C, E, k > 0, k <= E for the router, align >= 1, buffers non-null when there is work, row ids
// within int32 (moe_max_rows(N k, E, align) <= INT32_MAX), 1-D grids below 2^31 blocks. Expert ids
// outside [0, E) are not routed by the dispatch (row -1, not counted) instead of writing out of
// bounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "base/math/moe_router.h"
#include "base/math/moe_stats.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/moe.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;      // per-token, per-chunk and element-wise kernels
constexpr int kSumThreads = 256;   // moe_router_sums: one block per output
constexpr int kScanThreads = 128;  // the dispatch's scans
constexpr int kSlotWarps = 8;      // combine_backward: a warp per slot
// Dispatch chunks: at least kMinChunkSlots slots each, and E * chunks <= kChunkScratch ints.
constexpr int64_t kMinChunkSlots = 32;
constexpr int64_t kChunkScratch = int64_t(1) << 20;

bool valid_mode(MoeRouter m) {
  return m == MoeRouter::TopkSoftmax || m == MoeRouter::SoftmaxTopk || m == MoeRouter::SigmoidBias;
}

// Blocks of `threads` covering n items; 0 (refused) when a 1-D grid cannot hold them.
unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return b > INT_MAX ? 0u : unsigned(b);
}

__host__ __device__ int64_t chunks_per_row(int C) { return (C + kBf16Chunk - 1) / kBf16Chunk; }

// Row buffers move as 16-byte chunks when every row starts 16-byte aligned.
bool rows_vec(int C, const void* a, const void* b, const void* c = nullptr) {
  return C % kBf16Chunk == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c));
}

int dispatch_chunks(int64_t S, int E) {
  if (S == 0) return 0;
  const int64_t by_slots = (S + kMinChunkSlots - 1) / kMinChunkSlots;
  const int64_t by_scratch = kChunkScratch / E > 1 ? kChunkScratch / E : 1;
  return int(by_slots < by_scratch ? by_slots : by_scratch);
}

// ---- router -----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    moe_route_kernel(int32_t* idx, float* gates, float* probs, float* lse, const float* logits,
                     const float* select_bias, int N, int E, int k, MoeRouter mode,
                     bool norm_topk) {
  const int64_t t = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= N) return;
  const int64_t te = t * E, tk = t * k;
  lse[t] = moe_route_token(idx + tk, gates + tk, probs + te, logits + te, select_bias, E, k, mode,
                           norm_topk);
}

// grid (E + 2): block b < E sums probs[:, b], block E the lse^2, block E + 1 the entropies.
__global__ void __launch_bounds__(kSumThreads)
    moe_router_sums_kernel(double* sums, const float* probs, const float* lse, int N, int E) {
  __shared__ double part[kSumThreads];
  const int col = int(blockIdx.x);
  double acc = 0;
  for (int64_t t = threadIdx.x; t < N; t += kSumThreads) {
    const float* p = probs + t * E;
    if (col < E)
      acc += double(p[col]);
    else if (col == E)
      acc += double(lse[t]) * double(lse[t]);
    else
      acc += double(moe_entropy(p, E));
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int h = kSumThreads / 2; h > 0; h >>= 1) {
    if (int(threadIdx.x) < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[col] = part[0];
}

__global__ void __launch_bounds__(kThreads)
    moe_router_backward_kernel(float* dlogits, const float* dgates, const int32_t* idx,
                               const float* gates, const float* probs, const float* logits,
                               const float* lse, const float* aux_w, float z_coef, int N, int E,
                               int k, MoeRouter mode, bool norm_topk) {
  const int64_t t = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= N) return;
  const int64_t te = t * E, tk = t * k;
  moe_router_backward_token(dlogits + te, dgates + tk, idx + tk, gates + tk, probs + te,
                            logits + te, lse[t], aux_w, z_coef, E, k, mode, norm_topk);
}

// ---- dispatch ---------------------------------------------------------------------------------

// Exclusive scan of one int per thread over a block of kScanThreads (every thread calls it, once
// per kernel); *total gets the block's sum. Hillis-Steele in shared memory.
__device__ int block_exclusive_scan(int v, int* total) {
  __shared__ int buf[kScanThreads];
  const int i = int(threadIdx.x);
  buf[i] = v;
  __syncthreads();
  for (int o = 1; o < kScanThreads; o <<= 1) {
    const int add = i >= o ? buf[i - o] : 0;
    __syncthreads();
    buf[i] += add;
    __syncthreads();
  }
  *total = buf[kScanThreads - 1];
  return buf[i] - v;
}

// The slots [c * chunk, (c + 1) * chunk) of chunk c (the last ones may be short or empty).
struct SlotRange {
  int64_t begin, end;
};
__device__ SlotRange chunk_slots(int c, int64_t chunk, int64_t S) {
  const int64_t b = int64_t(c) * chunk, e = b + chunk;
  return {b < S ? b : S, e < S ? e : S};
}

// A thread per chunk: cnt[e * chunks + c] = the slots of chunk c that chose expert e.
__global__ void __launch_bounds__(kThreads)
    moe_dispatch_histogram_kernel(int32_t* cnt, const int32_t* idx, int64_t S, int E, int64_t chunk,
                                  int chunks) {
  const int c = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (c >= chunks) return;
  for (int e = 0; e < E; ++e) cnt[int64_t(e) * chunks + c] = 0;
  const SlotRange r = chunk_slots(c, chunk, S);
  for (int64_t s = r.begin; s < r.end; ++s) {
    const int32_t e = idx[s];
    if (e >= 0 && e < E) ++cnt[int64_t(e) * chunks + c];
  }
}

// grid E: block e turns cnt[e, :] into its exclusive scan over chunks; counts[e] = the total.
// Thread i owns a contiguous run of chunks.
__global__ void __launch_bounds__(kScanThreads)
    moe_dispatch_scan_kernel(int32_t* counts, int32_t* cnt, int chunks) {
  int32_t* row = cnt + int64_t(blockIdx.x) * chunks;
  const int per = (chunks + kScanThreads - 1) / kScanThreads;
  const int lo = min(chunks, int(threadIdx.x) * per), hi = min(chunks, lo + per);
  int sum = 0;
  for (int c = lo; c < hi; ++c) sum += row[c];
  int total;
  int run = block_exclusive_scan(sum, &total);
  for (int c = lo; c < hi; ++c) {
    const int n = row[c];
    row[c] = run;
    run += n;
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// One block: offsets (E) = the exclusive scan of the counts rounded up to `align`; token -1 on
// the padding rows after each segment and on every row past the last one, up to max_rows.
__global__ void __launch_bounds__(kScanThreads)
    moe_dispatch_offsets_kernel(int32_t* offsets, int32_t* token_of_row, const int32_t* counts,
                                int E, int align, int64_t max_rows) {
  const int per = (E + kScanThreads - 1) / kScanThreads;
  const int lo = min(E, int(threadIdx.x) * per), hi = min(E, lo + per);
  int sum = 0;
  for (int e = lo; e < hi; ++e) sum += (counts[e] + align - 1) / align * align;
  int total;
  int run = block_exclusive_scan(sum, &total);
  for (int e = lo; e < hi; ++e) {
    const int padded = (counts[e] + align - 1) / align * align;
    offsets[e] = run;
    for (int r = run + counts[e]; r < run + padded; ++r) token_of_row[r] = -1;
    run += padded;
  }
  for (int64_t r = int64_t(total) + threadIdx.x; r < max_rows; r += kScanThreads)
    token_of_row[r] = -1;
}

// A thread per chunk, its slots in order: slot s of expert e takes row offsets[e] + the chunk's
// next row of e (cnt holds the chunk's first row within e's segment).
__global__ void __launch_bounds__(kThreads)
    moe_dispatch_scatter_kernel(int32_t* row_of_slot, int32_t* token_of_row, int32_t* cnt,
                                const int32_t* offsets, const int32_t* idx, int64_t S, int E, int k,
                                int64_t chunk, int chunks) {
  const int c = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (c >= chunks) return;
  const SlotRange r = chunk_slots(c, chunk, S);
  for (int64_t s = r.begin; s < r.end; ++s) {
    const int32_t e = idx[s];
    if (e < 0 || e >= E) {
      row_of_slot[s] = -1;
      continue;
    }
    int32_t& next = cnt[int64_t(e) * chunks + c];
    const int32_t row = offsets[e] + next;
    ++next;
    row_of_slot[s] = row;
    token_of_row[row] = int32_t(s / k);
  }
}

// ---- gather / combine / scatter ---------------------------------------------------------------

// A thread per (row, chunk of 8 channels): the bits of x[token], or zeros on a padding row.
__global__ void __launch_bounds__(kThreads)
    moe_gather_kernel(bf16* rows, const bf16* x, const int32_t* token_of_row, int64_t R, int C,
                      bool vec) {
  const int64_t cpr = chunks_per_row(C);
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= R * cpr) return;
  const int64_t r = i / cpr;
  const int c0 = int(i % cpr) * kBf16Chunk;
  const int count = min(kBf16Chunk, C - c0);
  const int32_t tok = token_of_row[r];
  bf16* dst = rows + r * C + c0;
  if (tok < 0) {
    if (vec)
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    else
      for (int q = 0; q < count; ++q) dst[q] = __ushort_as_bfloat16(0);
    return;
  }
  const bf16* src = x + int64_t(tok) * C + c0;
  if (vec)
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  else
    for (int q = 0; q < count; ++q) dst[q] = src[q];
}

// A thread per (token, chunk): out = (accumulate ? out : 0) + sum_j g_j y[row_j], summed from 0
// and added once, one rounding. Null gates weigh every slot 1 (scatter_add: 1 * y is exact).
__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(bf16* out, const bf16* y, const float* gates, const int32_t* row_of_slot,
                       int N, int C, int k, bool accumulate, bool vec) {
  const int64_t cpr = chunks_per_row(C);
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= N * cpr) return;
  const int64_t t = i / cpr;
  const int c0 = int(i % cpr) * kBf16Chunk;
  const int count = min(kBf16Chunk, C - c0);
  float acc[kBf16Chunk], v[kBf16Chunk];
#pragma unroll
  for (int q = 0; q < kBf16Chunk; ++q) acc[q] = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int32_t row = row_of_slot[t * k + j];
    if (row < 0) continue;
    const float g = gates ? gates[t * k + j] : 1.0f;
    load_chunk(v, y + int64_t(row) * C + c0, count, vec);
#pragma unroll
    for (int q = 0; q < kBf16Chunk; ++q) acc[q] += g * v[q];
  }
  bf16* o = out + t * C + c0;
  if (accumulate) {
    load_chunk(v, o, count, vec);
#pragma unroll
    for (int q = 0; q < kBf16Chunk; ++q) acc[q] = v[q] + acc[q];
  }
  store_chunk(o, acc, count, vec);
}

// A warp per slot s = (t, j): dy[row] = bf16(g * dout[t]); dgates[s] = <dout[t], y[row]>, each
// lane over its chunks in order, then a butterfly. A dropped slot: dgates 0, dy untouched.
__global__ void __launch_bounds__(kSlotWarps * 32)
    moe_combine_backward_kernel(bf16* dy, float* dgates, const bf16* dout, const bf16* y,
                                const float* gates, const int32_t* row_of_slot, int64_t S, int C,
                                int k, bool vec) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t s = int64_t(blockIdx.x) * kSlotWarps + threadIdx.x / 32;
  if (s >= S) return;  // the whole warp
  const int32_t row = row_of_slot[s];
  if (row < 0) {
    if (lane == 0) dgates[s] = 0.0f;
    return;
  }
  const float g = gates[s];
  const bf16* d = dout + s / k * C;
  const bf16* yr = y + int64_t(row) * C;
  bf16* dr = dy + int64_t(row) * C;
  const int cpr = int(chunks_per_row(C));
  float dot = 0.0f;
  for (int ch = lane; ch < cpr; ch += 32) {
    const int c0 = ch * kBf16Chunk, count = min(kBf16Chunk, C - c0);
    float dv[kBf16Chunk], yv[kBf16Chunk], gv[kBf16Chunk];
    load_chunk(dv, d + c0, count, vec);
    load_chunk(yv, yr + c0, count, vec);
#pragma unroll
    for (int q = 0; q < kBf16Chunk; ++q) {
      gv[q] = g * dv[q];
      dot += dv[q] * yv[q];  // past count: 0 * 0
    }
    store_chunk(dr + c0, gv, count, vec);
  }
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (lane == 0) dgates[s] = dot;
}

}  // namespace

cudaError_t moe_route(int32_t* idx, float* gates, float* probs, float* lse, const float* logits,
                      const float* select_bias, int N, int E, int k, MoeRouter mode, bool norm_topk,
                      cudaStream_t s) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || !valid_mode(mode)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!idx || !gates || !probs || !lse || !logits ||
      (mode == MoeRouter::SigmoidBias && !select_bias))
    return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for(N, kThreads);
  moe_route_kernel<<<blocks, kThreads, 0, s>>>(idx, gates, probs, lse, logits, select_bias, N, E, k,
                                               mode, norm_topk);
  return cudaGetLastError();
}

cudaError_t moe_router_sums(double* sums, const float* probs, const float* lse, int N, int E,
                            cudaStream_t s) {
  // No tokens still writes the (E + 2) zero sums.
  if (N < 0 || E <= 0 || E > INT_MAX - 2 || !sums || (N > 0 && (!probs || !lse)))
    return cudaErrorInvalidValue;
  moe_router_sums_kernel<<<unsigned(E + 2), kSumThreads, 0, s>>>(sums, probs, lse, N, E);
  return cudaGetLastError();
}

int64_t moe_dispatch_scratch_ints(int N, int E, int k) {
  if (N < 0 || E <= 0 || k <= 0) return 0;
  return int64_t(E) * dispatch_chunks(int64_t(N) * k, E) + E;
}

cudaError_t moe_dispatch(int32_t* row_of_slot, int32_t* token_of_row, int32_t* counts,
                         int32_t* scratch, const int32_t* idx, int N, int E, int k, int align,
                         cudaStream_t s) {
  if (N < 0 || E <= 0 || k <= 0 || align < 1) return cudaErrorInvalidValue;
  const int64_t S = int64_t(N) * k;
  const int64_t max_rows = moe_max_rows(S, E, align);
  if (max_rows > INT_MAX) return cudaErrorInvalidValue;
  // No slots still writes the zero counts and the padding rows' -1.
  if (!counts || !scratch || (max_rows > 0 && !token_of_row) || (S > 0 && (!row_of_slot || !idx)))
    return cudaErrorInvalidValue;
  const int chunks = dispatch_chunks(S, E);
  const int64_t chunk = chunks ? (S + chunks - 1) / chunks : 0;
  int32_t* cnt = scratch;  // (E, chunks)
  int32_t* offsets = scratch + int64_t(E) * chunks;
  if (chunks) {
    moe_dispatch_histogram_kernel<<<blocks_for(chunks, kThreads), kThreads, 0, s>>>(cnt, idx, S, E,
                                                                                    chunk, chunks);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  moe_dispatch_scan_kernel<<<unsigned(E), kScanThreads, 0, s>>>(counts, cnt, chunks);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  moe_dispatch_offsets_kernel<<<1, kScanThreads, 0, s>>>(offsets, token_of_row, counts, E, align,
                                                         max_rows);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess || !chunks) return e;
  moe_dispatch_scatter_kernel<<<blocks_for(chunks, kThreads), kThreads, 0, s>>>(
      row_of_slot, token_of_row, cnt, offsets, idx, S, E, k, chunk, chunks);
  return cudaGetLastError();
}

cudaError_t moe_gather(bf16* rows, const bf16* x, const int32_t* token_of_row, int64_t R, int C,
                       cudaStream_t s) {
  if (R < 0 || C <= 0) return cudaErrorInvalidValue;
  if (R == 0) return cudaSuccess;
  if (!rows || !x || !token_of_row) return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for(R * chunks_per_row(C), kThreads);
  if (!blocks) return cudaErrorInvalidValue;
  moe_gather_kernel<<<blocks, kThreads, 0, s>>>(rows, x, token_of_row, R, C, rows_vec(C, rows, x));
  return cudaGetLastError();
}

cudaError_t moe_combine(bf16* out, const bf16* y, const float* gates, const int32_t* row_of_slot,
                        int N, int C, int k, bool accumulate, cudaStream_t s) {
  if (N < 0 || C <= 0 || k <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out || !y || !gates || !row_of_slot) return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for(N * chunks_per_row(C), kThreads);
  if (!blocks) return cudaErrorInvalidValue;
  moe_combine_kernel<<<blocks, kThreads, 0, s>>>(out, y, gates, row_of_slot, N, C, k, accumulate,
                                                 rows_vec(C, out, y));
  return cudaGetLastError();
}

cudaError_t moe_combine_backward(bf16* dy, float* dgates, const bf16* dout, const bf16* y,
                                 const float* gates, const int32_t* row_of_slot, int N, int C,
                                 int k, cudaStream_t s) {
  if (N < 0 || C <= 0 || k <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!dy || !dgates || !dout || !y || !gates || !row_of_slot) return cudaErrorInvalidValue;
  const int64_t S = int64_t(N) * k;
  const unsigned blocks = blocks_for(S, kSlotWarps);
  if (!blocks) return cudaErrorInvalidValue;
  moe_combine_backward_kernel<<<blocks, kSlotWarps * 32, 0, s>>>(
      dy, dgates, dout, y, gates, row_of_slot, S, C, k, rows_vec(C, dy, dout, y));
  return cudaGetLastError();
}

cudaError_t moe_scatter_add(bf16* dx, const bf16* drows, const int32_t* row_of_slot, int N, int C,
                            int k, cudaStream_t s) {
  if (N < 0 || C <= 0 || k <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!dx || !drows || !row_of_slot) return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for(N * chunks_per_row(C), kThreads);
  if (!blocks) return cudaErrorInvalidValue;
  moe_combine_kernel<<<blocks, kThreads, 0, s>>>(dx, drows, nullptr, row_of_slot, N, C, k, true,
                                                 rows_vec(C, dx, drows));
  return cudaGetLastError();
}

cudaError_t moe_router_backward(float* dlogits, const float* dgates, const int32_t* idx,
                                const float* gates, const float* probs, const float* logits,
                                const float* lse, const float* aux_w, float z_coef, int N, int E,
                                int k, MoeRouter mode, bool norm_topk, cudaStream_t s) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || !valid_mode(mode)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!dlogits || !dgates || !idx || !gates || !probs || !logits || !lse)
    return cudaErrorInvalidValue;
  moe_router_backward_kernel<<<blocks_for(N, kThreads), kThreads, 0, s>>>(
      dlogits, dgates, idx, gates, probs, logits, lse, aux_w, z_coef, N, E, k, mode, norm_topk);
  return cudaGetLastError();
}

}  // namespace eco::cuda
