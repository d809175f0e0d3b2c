// The emulator's fibers (shim/emu_fibers.h): pooled guarded stacks, the context switch, and the
// round-robin scheduler of one run on the calling host thread.
#include "emu_fibers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

// ECO_EMU_FIBERS_UCONTEXT: the portable switch on x86-64 too (to test it).
#if defined(__x86_64__) && !defined(ECO_EMU_FIBERS_UCONTEXT)
#define ECO_EMU_FIBERS_X86_64 1
extern "C" void emu_fiber_switch(void** save_sp, void* load_sp);
#else
#include <ucontext.h>
#endif

namespace emu::fiber {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "EMU ERROR: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

constexpr size_t kStackBytes = 256 * 1024;

// Stack i of this host thread's launches (kept until the thread exits): kStackBytes above a
// PROT_NONE guard page, so an overflow faults instead of running into the next stack.
class StackPool {
 public:
  StackPool() = default;
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    for (void* s : stacks_) munmap(s, guard() + kStackBytes);
  }
  char* top(unsigned i) {
    while (stacks_.size() <= i) {
      void* s = mmap(nullptr, guard() + kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (s == MAP_FAILED) fail("mmap of a fiber stack failed");
      if (mprotect(s, guard(), PROT_NONE) != 0) fail("mprotect of a fiber stack's guard failed");
      stacks_.push_back(s);
    }
    return static_cast<char*>(stacks_[i]) + guard() + kStackBytes;
  }

 private:
  static size_t guard() { return size_t(sysconf(_SC_PAGESIZE)); }
  std::vector<void*> stacks_;
};

[[noreturn]] void fiber_main() noexcept;

#ifdef ECO_EMU_FIBERS_X86_64
// A suspended context is its stack pointer; below it on its stack, from low to high: MXCSR and
// the x87 control word (8 bytes), r15, r14, r13, r12, rbx, rbp, the return address.
struct Context {
  void* sp = nullptr;
};
asm(R"(
  .pushsection .text
  .globl emu_fiber_switch
  .type emu_fiber_switch, @function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_fiber_switch, .-emu_fiber_switch
  .popsection
)");
void switch_context(Context& from, Context& to) { emu_fiber_switch(&from.sp, to.sp); }
// A fresh context "returns" into fiber_main with the stack as after a call (rsp + 8 16-byte
// aligned), the callee-saved registers zero and this thread's floating-point controls.
void make_context(Context& c, char* top) {
  auto* sp = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15));
  *--sp = 0;                                          // fiber_main's return address: none
  *--sp = reinterpret_cast<uint64_t>(&fiber_main);  // emu_fiber_switch's ret goes here
  for (int r = 0; r < 6; ++r) *--sp = 0;              // rbp, rbx, r12 .. r15
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  *--sp = uint64_t(mxcsr) | uint64_t(fpucw) << 32;
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
void switch_context(Context& from, Context& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) fail("swapcontext failed");
}
void make_context(Context& c, char* top) {
  if (getcontext(&c.uc) != 0) fail("getcontext failed");
  c.uc.uc_stack.ss_sp = top - kStackBytes;
  c.uc.uc_stack.ss_size = kStackBytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&fiber_main), 0);
}
#endif

struct Fiber {
  Context ctx;
  bool done = false;
  Wait wait{nullptr, nullptr};  // while waiting: until *phase != seen
  const uint64_t* phase = nullptr;
  uint64_t seen = 0;
};
struct Run {  // this host thread's run (kept: its fibers are reused, and read after a deadlock)
  void (*body)(void*, unsigned) = nullptr;
  void* arg = nullptr;
  std::vector<Fiber> fibers;
  unsigned current = 0;
  bool running = false;
  Context scheduler;
};
thread_local Run run_state;
thread_local StackPool stacks;

// An exception leaving a CUDA thread terminates, as it would leave a host thread.
void fiber_main() noexcept {
  Run& r = run_state;
  const unsigned i = r.current;
  r.body(r.arg, i);
  r.fibers[i].done = true;
  switch_context(r.fibers[i].ctx, r.scheduler);
  fail("a finished fiber was resumed");
}

}  // namespace

unsigned run(unsigned n, void (*body)(void*, unsigned), void* arg) {
  Run& r = run_state;
  if (r.running) fail("fiber::run inside a fiber run (a launch from a kernel?)");
  r.body = body;
  r.arg = arg;
  r.fibers.assign(n, Fiber{});
  for (unsigned i = 0; i < n; ++i) make_context(r.fibers[i].ctx, stacks.top(i));
  r.running = true;
  unsigned left = n;
  for (bool progressed = true; left > 0 && progressed;) {
    progressed = false;
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = r.fibers[i];
      if (f.done || (f.wait.barrier && *f.phase == f.seen)) continue;
      f.wait = {nullptr, nullptr};
      r.current = i;
      switch_context(r.scheduler, f.ctx);
      progressed = true;
      if (f.done) --left;
    }
  }
  r.running = false;
  return left;
}

Wait waiting_at(unsigned i) {
  if (i >= run_state.fibers.size()) fail("fiber::waiting_at: no such fiber in the last run");
  return run_state.fibers[i].wait;
}

void detail::wait(const Barrier* b, const uint64_t* phase, uint64_t seen, const char* op) {
  Run& r = run_state;
  if (!r.running) fail("a barrier wait outside a fiber run");
  Fiber& f = r.fibers[r.current];
  f.wait = {b, op};
  f.phase = phase;
  f.seen = seen;
  switch_context(f.ctx, r.scheduler);
}

}  // namespace emu::fiber
