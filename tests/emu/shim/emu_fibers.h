// Cooperative fibers for the CUDA emulator (tests/emu; included by cuda_runtime.h): a block's
// CUDA threads run as fibers on the launching host thread, one at a time in index order, each
// on its own stack, switching only where a barrier makes one wait. No host threads, no futexes.
// Stacks: 256 KiB each (kernels' frames measured at 2.4 KiB at most, 2026-12-02) above a guard
// page, mmap'd once per host thread and reused by every launch. The switch saves the x86-64
// SysV callee-saved registers, the stack pointer, MXCSR and the x87 control word (emu_fibers.cpp;
// <ucontext.h> elsewhere, whose swapcontext costs a sigprocmask system call per switch).
#pragma once
#include <cstdint>

namespace emu::fiber {

class Barrier;

// Runs body(arg, i) for i = 0 .. n - 1, each on a fiber of its own: fiber 0 until it returns or
// waits, then fiber 1, ..., and round again over the fibers that can go on. Returns when all
// returned (0) or when none can go on while some wait (a deadlock: the number still waiting,
// each at waiting_at(i); the caller reports them, as their stacks are abandoned). Not nested.
unsigned run(unsigned n, void (*body)(void* arg, unsigned i), void* arg);

// After run returned a deadlock: the barrier fiber i waits at (null if it returned) and the
// operation it was in (Barrier::arrive_and_wait's op).
struct Wait {
  const Barrier* barrier;
  const char* op;
};
Wait waiting_at(unsigned i);

namespace detail {
// The running fiber waits until *phase != seen, the other fibers running meanwhile.
void wait(const Barrier* b, const uint64_t* phase, uint64_t seen, const char* op);
}  // namespace detail

// std::barrier's meaning among the fibers of one run: each phase completes when every expected
// fiber arrived; the last to arrive goes on at once, the others wait until then. A fiber that
// drops out arrives for this phase and is not expected in later ones (an exited CUDA thread).
class Barrier {
 public:
  explicit Barrier(unsigned expected = 0) : expected_(expected) {}
  void arrive_and_wait(const char* op) {
    const uint64_t seen = phase_;
    if (arrive()) return;
    detail::wait(this, &phase_, seen, op);
  }
  void arrive_and_drop() {
    --expected_;
    if (arrived_ == expected_ && arrived_ > 0) complete();
  }
  unsigned arrived() const { return arrived_; }
  unsigned expected() const { return expected_; }

 private:
  bool arrive() {  // true: this arrival completed the phase
    if (++arrived_ < expected_) return false;
    complete();
    return true;
  }
  void complete() {
    arrived_ = 0;
    ++phase_;
  }
  unsigned expected_, arrived_ = 0;
  uint64_t phase_ = 0;
};

}  // namespace emu::fiber
