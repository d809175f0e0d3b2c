// Host emulation of dynamic shared memory and of the inline PTX the kernels use (tests/emu;
// included by cuda_runtime.h; transform.py turns `extern __shared__ T name[]` into a pointer to
// the block's buffer and `asm("mnemonic operands;" : outs : ins)` into emu::ptx::mnemonic(...)).
//
// Shared memory: each block of a launch gets the launch's bytes, 128-byte aligned, filled with
// 0xFF (NaN in fp32 and bf16) when the block starts. Shared-window addresses
// (__cvta_generic_to_shared) are offsets into that buffer plus kSharedBase; every PTX access
// through one is checked against the buffer and its alignment.
// cp.async (PTX ISA 9.7.9.25.3): per thread, uncommitted copies, then committed groups oldest
// first; wait_group N lands all but the newest N groups. The destination is poisoned at issue
// (undefined until the copy completes) and the data lands, the source read then, when wait_group
// completes the copy's group; src-size < cp-size zero-fills the rest (src-size 0 reads nothing).
// Races: within one barrier phase (between two __syncthreads), shared words that one warp writes
// by cp.async must not be read by ldmatrix or written by another warp; checked by phase, not by
// timing, so a missing __syncthreads before a tile is read or before a buffer is refilled aborts.
// ldmatrix and mma are warp-collective: every lane deposits its operands, one warp barrier, every
// lane computes its own outputs from all deposits. All 32 lanes must run the same instruction
// (a partial warp, an exited lane or lanes in different collectives abort). Fragment layouts as
// the PTX ISA (9.7.14.5.8, m16n8k16 .bf16; ldmatrix .m8n8 .b16): the low 16 bits of a register
// hold the lower-indexed element. mma accumulates in fp32, c + a_0 b_0 + ... + a_15 b_15 in k
// order (each bf16 product exact in fp32); the tensor cores' internal order and rounding are not
// modelled, so results may differ from the hardware's in the last bits. ex2.approx is exp2f (the
// hardware is within 2 ulp) with .ftz's flushing of subnormal inputs and results.
#pragma once
#include <cstdarg>
#include <deque>
#include <string>

namespace emu {

constexpr uint32_t kSharedBase = 1024;  // shared address of the dynamic buffer's first byte
constexpr size_t kSharedAlign = 128;    // alignment of the dynamic buffer
constexpr size_t kDefaultDynamicSmem = 48 * 1024;  // without cudaFuncSetAttribute's opt-in
constexpr size_t kMaxDynamicSmem = 227 * 1024;     // sm_90's opt-in limit per block

[[noreturn]] inline void fatal(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die(msg);
}

// The bytes [addr, addr + n) of the block's dynamic shared memory, addr a multiple of align.
inline unsigned char* shared_at(uint32_t addr, size_t n, size_t align, const char* what) {
  if (self == nullptr || self->sequential || block == nullptr || block->smem == nullptr)
    fatal("%s: no dynamic shared memory in this launch", what);
  if (addr % align != 0) fatal("%s: shared address %u not %zu-byte aligned", what, addr, align);
  if (addr < kSharedBase || addr - kSharedBase + n > block->smem_bytes)
    fatal("%s: shared bytes [%u, %zu) outside the block's %zu bytes (base %u)", what, addr,
          size_t(addr) + n, block->smem_bytes, kSharedBase);
  return block->smem + (addr - kSharedBase);
}

namespace ptx {

// ---- shared-memory race check -----------------------------------------------------------------
// Per 4-byte word of the dynamic buffer: the barrier phase (__syncthreads passed in the block) of
// the last PTX write (cp.async, at issue and when it lands) and of the last reads (ldmatrix), and
// by which warps. Within one phase, a word one warp writes must not be read or written by another
// warp (a missing __syncthreads before the reads or before a refill: RAW, WAR, WAW); detected
// whatever the threads' timing. Plain C++ accesses to shared memory are not tracked.
struct SharedShadow {
  static constexpr uint64_t kNever = ~0ull;  // phase 0xffffffff: matches no phase
  std::vector<uint64_t> reads, writes;       // phase << 32 | warp mask / warp
  void reset(size_t bytes) {                 // before each block
    reads.assign((bytes + 3) / 4, kNever);
    writes.assign((bytes + 3) / 4, kNever);
  }
};
inline SharedShadow shadow;

inline void note_read(const unsigned char* p, size_t n, const char* what) {
  const size_t off = size_t(p - block->smem);
  const uint64_t phase = self->syncthreads_passed, w = uint64_t(linear_tid() >> 5);
  for (size_t i = off / 4; i < (off + n + 3) / 4; ++i) {
    const uint64_t wr = shadow.writes[i];
    if (wr >> 32 == phase && (wr & 0xffffffffu) != w)
      fatal(
          "%s: reads shared bytes at offset %zu that warp %u wrote (cp.async) since the last "
          "__syncthreads",
          what, 4 * i, unsigned(wr & 0xffffffffu));
    const uint64_t rd = shadow.reads[i];
    shadow.reads[i] = rd >> 32 == phase ? rd | 1ull << w : phase << 32 | 1ull << w;
  }
}
inline void note_write(const unsigned char* p, size_t n, const char* what) {
  const size_t off = size_t(p - block->smem);
  const uint64_t phase = self->syncthreads_passed, w = uint64_t(linear_tid() >> 5);
  for (size_t i = off / 4; i < (off + n + 3) / 4; ++i) {
    const uint64_t rd = shadow.reads[i];
    if (rd >> 32 == phase && (rd & 0xffffffffu & ~(1ull << w)) != 0)
      fatal(
          "%s: overwrites shared bytes at offset %zu that another warp read since the last "
          "__syncthreads (mask 0x%x)",
          what, 4 * i, unsigned(rd & 0xffffffffu));
    const uint64_t wr = shadow.writes[i];
    if (wr >> 32 == phase && (wr & 0xffffffffu) != w)
      fatal(
          "%s: overwrites shared bytes at offset %zu that warp %u wrote since the last "
          "__syncthreads",
          what, 4 * i, unsigned(wr & 0xffffffffu));
    shadow.writes[i] = phase << 32 | w;
  }
}

// ---- cp.async ---------------------------------------------------------------------------------
// Each thread's queue: CudaThread::async_copies (cuda_runtime.h).

// Called before each block on each thread: no copies in flight, collectives counted afresh.
inline void thread_start() {
  self->async_copies.uncommitted.clear();
  self->async_copies.groups.clear();
  self->collective_seq = 0;
  self->syncthreads_passed = 0;
}

inline void cp_async(const char* what, uint32_t dst, const void* src, int cp_size, int src_size) {
  if (src_size < 0 || src_size > cp_size)
    fatal("%s: src-size %d, cp-size %d", what, src_size, cp_size);
  if (reinterpret_cast<uintptr_t>(src) % uintptr_t(cp_size) != 0)
    fatal("%s: global source %p not %d-byte aligned", what, src, cp_size);
  unsigned char* d = shared_at(dst, size_t(cp_size), size_t(cp_size), what);
  note_write(d, size_t(cp_size), what);
  std::memset(d, 0xFF, size_t(cp_size));  // undefined until the group completes
  self->async_copies.uncommitted.push_back(
      {d, static_cast<const unsigned char*>(src), cp_size, src_size});
}
inline void cp_async_cg_shared_global(uint32_t dst, const void* src, int cp_size, int src_size) {
  if (cp_size != 16) fatal("cp.async.cg: cp-size %d (only 16)", cp_size);
  cp_async("cp.async.cg", dst, src, cp_size, src_size);
}
inline void cp_async_cg_shared_global(uint32_t dst, const void* src, int cp_size) {
  cp_async_cg_shared_global(dst, src, cp_size, cp_size);
}
inline void cp_async_ca_shared_global(uint32_t dst, const void* src, int cp_size, int src_size) {
  if (cp_size != 4 && cp_size != 8 && cp_size != 16) fatal("cp.async.ca: cp-size %d", cp_size);
  cp_async("cp.async.ca", dst, src, cp_size, src_size);
}
inline void cp_async_ca_shared_global(uint32_t dst, const void* src, int cp_size) {
  cp_async_ca_shared_global(dst, src, cp_size, cp_size);
}
inline void cp_async_commit_group() {
  AsyncCopies& q = self->async_copies;
  q.groups.push_back(std::move(q.uncommitted));
  q.uncommitted.clear();
}
inline void cp_async_wait_group(int n) {
  if (n < 0) fatal("cp.async.wait_group %d", n);
  auto& groups = self->async_copies.groups;
  while (groups.size() > size_t(n)) {
    for (const AsyncCopy& c : groups.front()) {
      note_write(c.dst, size_t(c.bytes), "cp.async (landing at wait_group)");
      if (c.src_bytes > 0) std::memcpy(c.dst, c.src, size_t(c.src_bytes));
      std::memset(c.dst + c.src_bytes, 0, size_t(c.bytes - c.src_bytes));
    }
    groups.pop_front();
  }
}
inline void cp_async_wait_all() {
  cp_async_commit_group();
  cp_async_wait_group(0);
}

// ---- warp collectives -------------------------------------------------------------------------
enum Collective : uint32_t { kLdmatrix = 1, kLdmatrixTrans = 2, kMma = 3 };
constexpr int kWords = 6;  // 32-bit operand words a lane deposits, at most

// Double-buffered by the lanes' collective count: a lane can refill its slot of parity p only
// after the next collective's barrier, which every lane reaches after reading this one's. So a
// lane may finish (even exit) while others still read: the check that all 32 lanes took part is
// by tag (launch, block, kind, count), not by the exited flags.
struct Tag {
  uint64_t block, op;  // launch and block; kind << 32 | this lane's collective count
  bool operator!=(const Tag& o) const { return block != o.block || op != o.op; }
};
struct WarpDeposits {
  uint32_t words[2][32][32][kWords];  // [parity][warp][lane][word]
  Tag tag[2][32][32];
};
inline WarpDeposits warp_deposits;  // one block runs at a time

// Deposits this lane's words and waits for the warp; the warp's deposits ([lane][word]), valid
// until this lane's next collective.
inline const uint32_t (*warp_collective(Collective kind, const uint32_t* words, int n,
                                        const char* what))[kWords] {
  if (self->sequential) fatal("%s in a sequential launch", what);
  const int t = linear_tid(), w = t >> 5, l = t & 31;
  Block& b = *block;
  if (b.n < unsigned(w + 1) * 32u) fatal("%s: needs all 32 lanes, the warp is partial", what);
  const uint32_t seq = self->collective_seq++;
  const int p = int(seq & 1u);
  const uint3 bi = self->bIdx;
  const uint64_t block_id = bi.x + uint64_t(self->gDim.x) * (bi.y + uint64_t(self->gDim.y) * bi.z);
  const Tag tag{uint64_t(launches) << 40 | block_id, uint64_t(kind) << 32 | seq};
  std::memcpy(warp_deposits.words[p][w][l], words, sizeof(uint32_t) * size_t(n));
  warp_deposits.tag[p][w][l] = tag;
  wait_at(b.warp_bars[size_t(w)], what);
  for (int s = 0; s < 32; ++s)
    if (warp_deposits.tag[p][w][s] != tag)
      fatal("%s: lane %d %s", what, s,
            b.exited[w * 32 + s] ? "has exited" : "runs another collective (divergence)");
  return warp_deposits.words[p][w];
}

inline float bf16_lo(uint32_t r) { return __uint_as_float(r << 16); }
inline float bf16_hi(uint32_t r) { return __uint_as_float(r & 0xFFFF0000u); }

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8i + j gives the address of row j of
// matrix i (16 bytes, 16-byte aligned). Register i of lane l holds matrix i's elements (row l/4,
// columns 2(l%4), 2(l%4)+1); with .trans, of the transposed matrix: (rows 2(l%4), 2(l%4)+1,
// column l/4) of the rows as stored.
template <bool kTrans>
inline void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  const char* what = kTrans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
  note_read(shared_at(addr, 16, 16, what), 16, what);  // the row this lane addresses
  const auto* rows = warp_collective(kTrans ? kLdmatrixTrans : kLdmatrix, &addr, 1, what);
  const int l = linear_tid() & 31, g = l / 4, c = l % 4;
  uint32_t r[4];
  for (int i = 0; i < 4; ++i) {
    if (!kTrans) {
      std::memcpy(&r[i], shared_at(rows[8 * i + g][0], 16, 16, what) + 4 * c, 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, shared_at(rows[8 * i + 2 * c][0], 16, 16, what) + 2 * g, 2);
      std::memcpy(&hi, shared_at(rows[8 * i + 2 * c + 1][0], 16, 16, what) + 2 * g, 2);
      r[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
  r0 = r[0];
  r1 = r[1];
  r2 = r[2];
  r3 = r[3];
}
inline void ldmatrix_sync_aligned_m8n8_x4_shared_b16(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                     uint32_t& r3, uint32_t addr) {
  ldmatrix_x4<false>(r0, r1, r2, r3, addr);
}
inline void ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                           uint32_t& r3, uint32_t addr) {
  ldmatrix_x4<true>(r0, r1, r2, r3, addr);
}

// D (16 x 8) = A (16 x 16) B (16 x 8) + C. Lane l, g = l / 4, c = l % 4 holds
//   A: a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..);
//   B: b0 = (k 2c..2c+1, n g), b1 = (k 2c+8..2c+9, n g);
//   C, D: (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1).
inline void mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(float& d0, float& d1, float& d2,
                                                                float& d3, uint32_t a0, uint32_t a1,
                                                                uint32_t a2, uint32_t a3,
                                                                uint32_t b0, uint32_t b1, float c0,
                                                                float c1, float c2, float c3) {
  const uint32_t mine[kWords] = {a0, a1, a2, a3, b0, b1};
  const auto* x = warp_collective(kMma, mine, kWords, "mma.m16n8k16");
  const int l = linear_tid() & 31, g = l / 4, c = l % 4;
  float a[2][16], b[2][16];  // A rows g, g + 8; B columns 2c, 2c + 1 (over k)
  for (int q = 0; q < 4; ++q) {
    const uint32_t* lane_a = x[4 * g + q];  // the quad holding rows g and g + 8
    for (int r = 0; r < 2; ++r) {
      a[r][2 * q] = bf16_lo(lane_a[r]);
      a[r][2 * q + 1] = bf16_hi(lane_a[r]);
      a[r][2 * q + 8] = bf16_lo(lane_a[r + 2]);
      a[r][2 * q + 9] = bf16_hi(lane_a[r + 2]);
    }
    for (int n = 0; n < 2; ++n) {
      const uint32_t* lane_b = x[4 * (2 * c + n) + q];  // the quad holding column 2c + n
      b[n][2 * q] = bf16_lo(lane_b[4]);
      b[n][2 * q + 1] = bf16_hi(lane_b[4]);
      b[n][2 * q + 8] = bf16_lo(lane_b[5]);
      b[n][2 * q + 9] = bf16_hi(lane_b[5]);
    }
  }
  float acc[4] = {c0, c1, c2, c3};
  for (int e = 0; e < 4; ++e)
    for (int k = 0; k < 16; ++k) acc[e] += a[e / 2][k] * b[e % 2][k];
  d0 = acc[0];
  d1 = acc[1];
  d2 = acc[2];
  d3 = acc[3];
}

// ---- special functions ------------------------------------------------------------------------
inline void ex2_approx_ftz_f32(float& d, float a) {
  if (std::fpclassify(a) == FP_SUBNORMAL) a = std::copysign(0.0f, a);
  const float y = std::exp2(a);                       // 2^-inf = +0, NaN stays NaN
  d = std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;  // y >= 0
}

}  // namespace ptx
}  // namespace emu

// rcp.rn.f32: the IEEE reciprocal, rounded to nearest (as host division).
inline float __frcp_rn(float x) { return 1.0f / x; }

// The block's dynamic shared memory as T (transform.py: extern __shared__ T name[]).
template <class T, size_t kAlign>
T* emu_dynamic_smem() {
  static_assert(kAlign <= emu::kSharedAlign, "dynamic shared memory aligned to 128 bytes only");
  if (emu::self->sequential) emu::die("dynamic shared memory in a sequential launch");
  return reinterpret_cast<T*>(emu::block->smem);  // null when the launch asked for 0 bytes
}

// Generic -> shared-window address of a pointer into the block's dynamic shared memory.
inline size_t __cvta_generic_to_shared(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const emu::Block* b = emu::self == nullptr || emu::self->sequential ? nullptr : emu::block;
  if (b == nullptr || b->smem == nullptr)
    emu::die("__cvta_generic_to_shared without dynamic shared memory");
  const uintptr_t base = reinterpret_cast<uintptr_t>(b->smem);
  if (a < base || a > base + b->smem_bytes)
    emu::die("__cvta_generic_to_shared of a pointer outside the block's shared memory");
  return emu::kSharedBase + (a - base);
}
