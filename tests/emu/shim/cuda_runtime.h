// Host emulation of the CUDA runtime pieces the kernels use (tests/emu; not CUDA, no GPU).
// A launch runs its blocks one after another (grid x fastest, then y, then z; or reversed, to
// expose inter-block order dependences), each block's CUDA threads as fibers on the launching
// host thread (emu_fibers.h: in thread index order, each running until it returns or waits),
// with a real block barrier (__syncthreads) and real per-warp exchanges (__shfl_*_sync). A
// barrier that some threads wait at and the others can never reach aborts, naming it. Kernels
// free of barriers and shuffles may run "sequential": every CUDA thread in turn on the calling
// host thread (a barrier or shuffle in that mode aborts). Exited threads drop out of the block
// barrier, as on the GPU; a shuffle that reads an exited lane aborts. Device memory is host
// memory. Work on a stream runs at once on the calling host thread, or, on a stream a test
// deferred (emu::DeferStreams, emu::defer_stream), waits in the stream's queue until CUDA's
// ordering makes it due: events, waits and synchronizations in emu_streams.h. The include
// directory holding this file comes first, so it replaces the real header.
#pragma once
#ifdef __CUDA_RUNTIME_H__
#error "the real cuda_runtime.h was included before the emulator shim"
#endif
#define ECO_CUDA_EMU 1
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "emu_fibers.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emu"; }
inline const char* cudaGetErrorName(cudaError_t) { return "emuError"; }

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

// Device math the kernels call unqualified.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }

namespace emu {
namespace ptx {  // cp.async's queue of one thread (emu_ptx.h)
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes, src_bytes;
};
struct AsyncCopies {
  std::vector<AsyncCopy> uncommitted;
  std::deque<std::vector<AsyncCopy>> groups;  // committed, oldest first
};
}  // namespace ptx

// What one CUDA thread has of its own. The running one is *self: a fiber's (set when it starts,
// restored after each wait: wait_at) or a sequential launch's; null outside kernels.
struct CudaThread {
  uint3 tIdx{}, bIdx{};
  dim3 bDim, gDim;
  bool sequential = false;          // runs in a sequential launch
  uint32_t syncthreads_passed = 0;  // in this block (emu_ptx.h's race check)
  uint32_t collective_seq = 0;      // this lane's warp collectives in the block (emu_ptx.h)
  ptx::AsyncCopies async_copies;    // cp.async copies in flight (emu_ptx.h)
};
inline thread_local CudaThread* self = nullptr;

struct Block {  // state of the block being run (one block at a time, one launch at a time)
  unsigned n = 0;
  fiber::Barrier bar;
  std::vector<fiber::Barrier> warp_bars;
  uint64_t vals[32][32];  // shuffle exchange, [warp][lane]
  bool exited[1024];      // per linear thread id
  bool any_exited = false;
  unsigned char* smem = nullptr;  // dynamic shared memory (emu_ptx.h), smem_bytes of it
  size_t smem_bytes = 0;
};
inline Block* block = nullptr;
// A block launch in progress: the block state above is the process's, so a second launch at the
// same time (from another host thread, or from inside a kernel) aborts.
inline std::atomic<bool> block_launch_running{false};

// Settings of the next launches (set by the tests; a launch takes them when it is made).
inline bool sequential = false;      // run the next launches sequentially (no barrier allowed)
inline bool reverse_blocks = false;  // run blocks in reverse order
inline long launches = 0;
// __syncthreads reached while a thread of the block had exited (a flag for debugging)
inline std::atomic<long> syncs_after_exit{0};

inline int linear_tid() {
  return int(self->tIdx.x + self->tIdx.y * self->bDim.x +
             self->tIdx.z * self->bDim.x * self->bDim.y);
}
[[noreturn]] inline void die(const char* what) {
  if (self)
    std::fprintf(stderr, "EMU ERROR: %s (block %u,%u,%u thread %u,%u,%u)\n", what, self->bIdx.x,
                 self->bIdx.y, self->bIdx.z, self->tIdx.x, self->tIdx.y, self->tIdx.z);
  else
    std::fprintf(stderr, "EMU ERROR: %s\n", what);
  std::fflush(stderr);
  std::abort();
}
}  // namespace emu

// Streams and events: immediate, or deferred by a test (emu_streams.h).
#include "emu_streams.h"

namespace emu {

// Arrives at barrier b and waits for the phase to complete, the block's other fibers running
// meanwhile (op: the operation waiting, for a deadlock's message).
inline void wait_at(fiber::Barrier& b, const char* op) {
  CudaThread* const me = self;
  b.arrive_and_wait(op);
  self = me;
}

// Every lane of the warp deposits its value, then reads lane `src`'s.
template <class T>
T exchange(T v, int src, bool keep_own, const char* op) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  if (self->sequential) die("warp shuffle in a sequential launch");
  const int t = linear_tid(), w = t >> 5, l = t & 31;
  Block& b = *block;
  fiber::Barrier& bar = b.warp_bars[size_t(w)];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  b.vals[w][l] = bits;
  wait_at(bar, op);
  T r = v;
  if (!keep_own) {
    const int lanes = int(std::min<unsigned>(32u, b.n - unsigned(w) * 32u));
    if (src >= lanes) die("shuffle source lane outside the block");
    if (b.exited[w * 32 + src]) die("shuffle reads a lane that has exited");
    const uint64_t rb = b.vals[w][src];
    std::memcpy(&r, &rb, sizeof(T));
  }
  wait_at(bar, op);
  return r;
}
}  // namespace emu

#define threadIdx (emu::self->tIdx)
#define blockIdx (emu::self->bIdx)
#define blockDim (emu::self->bDim)
#define gridDim (emu::self->gDim)

inline void __syncthreads() {
  if (emu::self->sequential) emu::die("__syncthreads in a sequential launch");
  if (emu::block->any_exited) ++emu::syncs_after_exit;
  emu::wait_at(emu::block->bar, "__syncthreads");
  ++emu::self->syncthreads_passed;
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  if (emu::self->sequential) emu::die("__syncwarp in a sequential launch");
  const int w = emu::linear_tid() >> 5;
  emu::wait_at(emu::block->warp_bars[size_t(w)], "__syncwarp");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int o, int width = 32) {
  if (mask != 0xffffffffu || width != 32) emu::die("only full-warp shuffles are emulated");
  return emu::exchange(v, (emu::linear_tid() & 31) ^ o, false, "__shfl_xor_sync");
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  if (mask != 0xffffffffu || width != 32) emu::die("only full-warp shuffles are emulated");
  return emu::exchange(v, src & 31, false, "__shfl_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  if (mask != 0xffffffffu || width != 32) emu::die("only full-warp shuffles are emulated");
  const int l = emu::linear_tid() & 31;
  return emu::exchange(v, l + int(d) < 32 ? l + int(d) : l, l + int(d) >= 32, "__shfl_down_sync");
}
[[noreturn]] inline void __trap() { emu::die("__trap"); }
// __ballot_sync: every lane deposits its predicate, each gets the mask of the true ones (full
// warps only: a full mask over a partial warp names lanes that do not exist).
inline unsigned __ballot_sync(unsigned mask, int pred) {
  if (mask != 0xffffffffu) emu::die("only full-warp ballots are emulated");
  if (emu::self->sequential) emu::die("warp ballot in a sequential launch");
  const int t = emu::linear_tid(), w = t >> 5, l = t & 31;
  emu::Block& b = *emu::block;
  if (b.n < unsigned(w + 1) * 32u) emu::die("full-mask ballot in a partial warp");
  emu::fiber::Barrier& bar = b.warp_bars[size_t(w)];
  b.vals[w][l] = pred != 0;
  emu::wait_at(bar, "__ballot_sync");
  unsigned m = 0;
  for (int s = 0; s < 32; ++s) {
    if (b.exited[w * 32 + s]) emu::die("ballot over a lane that has exited");
    if (b.vals[w][s]) m |= 1u << s;
  }
  emu::wait_at(bar, "__ballot_sync");
  return m;
}
inline int __ffs(int x) { return __builtin_ffs(x); }

#include "emu_ptx.h"  // dynamic shared memory, inline PTX

namespace emu {
// No fiber of the block can go on while some wait (a barrier they wait at is one the others
// never reach): names each barrier and operation waited in, with its first thread.
[[noreturn]] inline void die_deadlocked(const std::vector<CudaThread>& threads) {
  std::string msg = "deadlock, no thread of the block can go on:";
  std::vector<bool> told(threads.size(), false);
  for (size_t i = 0; i < threads.size(); ++i) {
    const fiber::Wait w = fiber::waiting_at(unsigned(i));
    if (!w.barrier || told[i]) continue;
    unsigned count = 0;
    for (size_t j = i; j < threads.size(); ++j) {
      const fiber::Wait o = fiber::waiting_at(unsigned(j));
      if (o.barrier == w.barrier && std::strcmp(o.op, w.op) == 0) {
        told[j] = true;
        ++count;
      }
    }
    const std::string where =
        w.barrier == &block->bar
            ? std::string("the block barrier")
            : "warp " + std::to_string(w.barrier - block->warp_bars.data()) + "'s barrier";
    const uint3 t = threads[i].tIdx;
    char line[256];
    std::snprintf(line, sizeof line,
                  " %u wait%s in %s at %s (%u of %u arrived; thread %u,%u,%u first);", count,
                  count == 1 ? "s" : "", w.op, where.c_str(), w.barrier->arrived(),
                  w.barrier->expected(), t.x, t.y, t.z);
    msg += line;
  }
  msg.back() = ' ';
  const uint3 bi = threads[0].bIdx;
  msg += "(block " + std::to_string(bi.x) + "," + std::to_string(bi.y) + "," +
         std::to_string(bi.z) + ")";
  self = nullptr;
  die(msg.c_str());
}
}  // namespace emu

namespace emu {
// A launch as made: its shape and the settings in force then (it may run later, queued on a
// deferred stream).
struct Launch {
  dim3 grid, block;
  size_t smem;
  bool sequential, reverse_blocks;
};

// Runs launch l: its blocks one after another, each block's threads as fibers (or in turn, for a
// sequential launch), every thread calling kernel with its own copies of args.
template <class K, class Args>
void run_launch(const Launch& l, const K& kernel, const Args& args) {
  const dim3 grid = l.grid, block = l.block;
  const size_t smem = l.smem;
  const unsigned n = block.x * block.y * block.z;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  auto block_index = [&](uint64_t k) {
    if (l.reverse_blocks) k = blocks - 1 - k;
    return uint3{unsigned(k % grid.x), unsigned(k / grid.x % grid.y),
                 unsigned(k / (uint64_t(grid.x) * grid.y))};
  };
  if (l.sequential) {
    emu::CudaThread t;
    t.sequential = true;
    t.bDim = block;
    t.gDim = grid;
    emu::self = &t;
    for (uint64_t k = 0; k < blocks; ++k) {
      t.bIdx = block_index(k);
      for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
          for (unsigned x = 0; x < block.x; ++x) {
            t.tIdx = {x, y, z};
            emu::ptx::thread_start();
            std::apply(kernel, args);
          }
    }
    emu::self = nullptr;
    return;
  }
  if (emu::block_launch_running.exchange(true))
    emu::die("two launches at once (from two host threads): the emulator runs one at a time");
  auto state = std::make_unique<emu::Block>();
  emu::Block& b = *state;
  b.n = n;
  std::vector<unsigned char> smem_storage(smem ? smem + emu::kSharedAlign : 0);
  if (smem) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(smem_storage.data());
    b.smem = smem_storage.data() + (emu::kSharedAlign - p % emu::kSharedAlign) % emu::kSharedAlign;
    b.smem_bytes = smem;
  }
  const unsigned warps = (n + 31) / 32;
  std::vector<emu::CudaThread> threads(n);  // fiber i runs linear thread i (x fastest)
  for (unsigned i = 0; i < n; ++i) {
    threads[i].tIdx = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
    threads[i].bDim = block;
    threads[i].gDim = grid;
  }
  struct Run {
    const K& kernel;
    const Args& args;
    emu::Block& b;
    std::vector<emu::CudaThread>& threads;
  } run{kernel, args, b, threads};
  const auto body = [](void* r, unsigned i) {
    Run& run = *static_cast<Run*>(r);
    emu::self = &run.threads[i];
    emu::ptx::thread_start();
    std::apply(run.kernel, run.args);
    // Exited: out of the block barrier and of the warp's exchanges.
    run.b.exited[i] = true;
    run.b.any_exited = true;
    run.b.bar.arrive_and_drop();
    run.b.warp_bars[i >> 5].arrive_and_drop();
  };
  emu::block = &b;
  for (uint64_t k = 0; k < blocks; ++k) {
    // Fresh barriers, nobody exited; unwritten shared memory reads NaN.
    b.bar = emu::fiber::Barrier(n);
    b.warp_bars.assign(warps, emu::fiber::Barrier(32));
    if (n % 32) b.warp_bars.back() = emu::fiber::Barrier(n % 32);
    std::fill_n(b.exited, n, false);
    b.any_exited = false;
    if (b.smem) std::memset(b.smem, 0xFF, b.smem_bytes);
    emu::ptx::shadow.reset(b.smem_bytes);
    const uint3 bidx = block_index(k);
    for (emu::CudaThread& t : threads) t.bIdx = bidx;
    if (emu::fiber::run(n, body, &run) != 0) emu::die_deadlocked(threads);
    emu::self = nullptr;
  }
  emu::block = nullptr;
  emu::block_launch_running.store(false);
}

// A launch on stream s: checked, counted and its arguments copied now (as CUDA copies them at the
// launch; a kernel may modify its by-value parameters, each thread its own copy), run now or
// when a deferred stream gets to it.
template <class K, class... A>
void launch(cudaStream_t s, dim3 grid, dim3 block, size_t smem, K kernel, A&&... a) {
  const unsigned n = block.x * block.y * block.z;
  if (n == 0 || n > 1024) die("block size must be 1..1024");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) die("empty grid");
  if (grid.y > 65535 || grid.z > 65535) die("grid.y / grid.z above 65535");
  if (block.z > 64) die("block.z above 64");
  if (self) die("a launch from inside a kernel");
  if (sequential && smem) die("dynamic shared memory in a sequential launch");
  ++launches;
  const Launch l{grid, block, smem, sequential, reverse_blocks};
  on_stream(s, [l, kernel, args = std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)] {
    run_launch(l, kernel, args);
  });
}
}  // namespace emu

// The transform turns kernel<<<grid, block, 0, stream>>>(args) into
// emu_launch_on(stream, grid, block, [=](auto&&... a) { kernel(a...); }, args) (a stream left out
// is the legacy stream, nullptr); a templated kernel deduces its arguments as in CUDA.
// emu_launch: the same on the legacy stream; emu_launch_smem: with smem bytes of dynamic shared
// memory per block, on the legacy stream.
template <class K, class... A>
void emu_launch_on(cudaStream_t s, dim3 grid, dim3 block, K kernel, A&&... a) {
  emu::launch(s, grid, block, 0, kernel, std::forward<A>(a)...);
}
template <class K, class... A>
void emu_launch(dim3 grid, dim3 block, K kernel, A&&... a) {
  emu::launch(nullptr, grid, block, 0, kernel, std::forward<A>(a)...);
}
template <class K, class... A>
void emu_launch_smem(dim3 grid, dim3 block, size_t smem, K kernel, A&&... a) {
  emu::launch(nullptr, grid, block, smem, kernel, std::forward<A>(a)...);
}

// First in the body of every kernel declared __launch_bounds__(max_threads) (the transform puts
// it there): on a GPU a bigger block does not launch.
inline void emu_check_launch_bounds(unsigned max_threads, const char* kernel) {
  const unsigned n = emu::self->bDim.x * emu::self->bDim.y * emu::self->bDim.z;
  if (n > max_threads)
    emu::fatal("%s: a block of %u threads, above its __launch_bounds__(%u)", kernel, n,
               max_threads);
}

// Dynamic shared memory above 48 KiB needs cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first, at most 227 KiB (sm_90); the opt-ins
// are kept per kernel address, as the runtime keeps them per function.
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
namespace emu {
inline std::map<uintptr_t, size_t> smem_opt_in;  // kernel address -> bytes allowed
struct SmemLaunch {
  std::string kernel;
  size_t bytes;
};
inline std::vector<SmemLaunch> smem_launches;  // every launch with dynamic shared memory
}  // namespace emu
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > emu::kMaxDynamicSmem) return cudaErrorInvalidValue;
    emu::smem_opt_in[reinterpret_cast<uintptr_t>(kernel)] = size_t(value);
  }
  return cudaSuccess;
}
// The transform's form of kernel<<<grid, block, smem, stream>>>(args), smem != 0 (name: the
// kernel as written, for the log); without the stream, on the legacy stream.
template <class F, class K, class... A>
void emu_launch_dyn(cudaStream_t s, dim3 grid, dim3 block, size_t smem, const char* name, F* fn,
                    K kernel, A&&... a) {
  if (smem > emu::kMaxDynamicSmem)
    emu::fatal("%s: %zu bytes of dynamic shared memory, above sm_90's %zu", name, smem,
               emu::kMaxDynamicSmem);
  if (smem > emu::kDefaultDynamicSmem) {
    const auto it = emu::smem_opt_in.find(reinterpret_cast<uintptr_t>(fn));
    if (it == emu::smem_opt_in.end() || it->second < smem)
      emu::fatal("%s: %zu bytes of dynamic shared memory (over 48 KiB) without "
                 "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) to that size",
                 name, smem);
  }
  emu::smem_launches.push_back({name, smem});
  emu::launch(s, grid, block, smem, kernel, std::forward<A>(a)...);
}
template <class F, class K, class... A>
void emu_launch_dyn(dim3 grid, dim3 block, size_t smem, const char* name, F* fn, K kernel,
                    A&&... a) {
  emu_launch_dyn(nullptr, grid, block, smem, name, fn, kernel, std::forward<A>(a)...);
}

// Device memory is host memory, filled with 0xFF by cudaMalloc. Live allocations are recorded (address -> bytes), so
// that the emulated cuBLASLt can check an operand's footprint against its allocation, and
// cudaFree refuses a pointer that is not one (a double free, a host pointer).
namespace emu {
inline std::map<uintptr_t, size_t> allocations;
// The allocation holding address p: {start, bytes}, or {0, 0} for memory not from cudaMalloc.
inline std::pair<uintptr_t, size_t> allocation_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return {0, 0};
  --it;
  if (a >= it->first + std::max<size_t>(it->second, 1)) return {0, 0};
  return {it->first, it->second};
}
}  // namespace emu
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xFF, n);  // undefined on the GPU: here NaN (fp32, bf16), so a read shows
  emu::allocations[reinterpret_cast<uintptr_t>(*p)] = n;
  return cudaSuccess;
}
// cudaFree, cudaMemcpy and cudaMemset wait for every stream (of this host thread: its deferred
// queues run first); the Async forms are work on their stream.
inline cudaError_t cudaFree(void* p) {
  emu::run_thread_queues();
  if (!p) return cudaSuccess;
  if (!emu::allocations.erase(reinterpret_cast<uintptr_t>(p))) return cudaErrorInvalidValue;
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  emu::run_thread_queues();
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  emu::run_thread_queues();
  std::memset(p, v, n);
  return cudaSuccess;
}
// Queued on a deferred stream, the copy reads its source when the queue reaches it, whatever
// memory the host side is (CUDA's "might be synchronous" for pageable memory, taken at its
// weakest).
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind,
                                   cudaStream_t stream = nullptr) {
  emu::on_stream(stream, [d, s, n] { std::memcpy(d, s, n); });
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t stream = nullptr) {
  emu::on_stream(stream, [p, v, n] { std::memset(p, v, n); });
  return cudaSuccess;
}

// One emulated device whose compute capability the tests set (emu::device_cc, 10 * major +
// minor; 90 = H100 / H200 unless ECO_EMU_CC says otherwise): GemmEngine reads it at construction
// and the emulated cuBLASLt (shim/cublasLt.h) refuses what that architecture cannot do.
namespace emu {
inline int default_cc() {
  const char* e = std::getenv("ECO_EMU_CC");
  return e && *e ? std::atoi(e) : 90;
}
inline int device_cc = default_cc();
}  // namespace emu
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76
};
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount;
};
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int dev) {
  if (dev != 0) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *v = emu::device_cc / 10; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = emu::device_cc % 10; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 132; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
  if (dev != 0) return cudaErrorInvalidValue;
  *p = {};
  std::snprintf(p->name, sizeof p->name, "emulated sm_%d (tests/emu)", emu::device_cc);
  p->totalGlobalMem = size_t(141) << 30;
  p->major = emu::device_cc / 10;
  p->minor = emu::device_cc % 10;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}
namespace emu {
// The physical GPU this thread's emulated device stands for (the device number of its PCI bus
// id): a test that runs ranks as threads gives each rank its own, as on a machine with a GPU per
// rank; 0 otherwise.
inline thread_local int device_slot = 0;
}  // namespace emu
inline cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int dev) {
  if (dev != 0 || len < 13) return cudaErrorInvalidValue;
  std::snprintf(id, size_t(len), "0000:%02x:00.0", emu::device_slot & 0xff);
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  *total_b = size_t(141) << 30;
  *free_b = *total_b;
  return cudaSuccess;
}

// Vector accesses (the transform routes reinterpret_cast<V*> through this): the address must be
// aligned to the access size, as the GPU requires.
template <class T, size_t kAlign, class P>
T* emu_al(P* p) {
  if (reinterpret_cast<uintptr_t>(p) % kAlign != 0) {
    std::fprintf(stderr, "EMU ERROR: misaligned %zu-byte vector access at %p\n", kAlign,
                 static_cast<const void*>(p));
    std::abort();
  }
  return reinterpret_cast<T*>(p);
}
