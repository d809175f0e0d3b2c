// Streams and events of the emulated CUDA runtime (tests/emu; included by cuda_runtime.h). A
// stream runs its work at once on the calling host thread, unless a test defers it
// (emu::DeferStreams, emu::defer_stream): a deferred stream's work (launches, cudaMemcpyAsync,
// cudaMemsetAsync, cublasLtMatmul, NCCL groups, event records) waits in the stream's queue, in
// order, and runs only when CUDA's ordering makes it due:
//  - cudaStreamSynchronize, cudaStreamDestroy, emu::defer_stream(s, false): the whole queue;
//  - cudaEventSynchronize, cudaEventElapsedTime, and cudaStreamWaitEvent on a stream that is not
//    deferred: the recording stream's queue up to and including the event's record, no further;
//  - cudaStreamWaitEvent on a deferred stream: queued there; when that stream reaches it, the
//    recording stream runs up to the record captured at the call (a later re-record of the event
//    does not move it, as in CUDA); a wait on an event never recorded, or complete, is nothing;
//  - anything on the legacy stream (nullptr: emu_launch, cudaMemcpyAsync(..., nullptr), an event
//    recorded or an NCCL group on it, cudaStreamSynchronize(nullptr)), synchronous cudaMemcpy /
//    cudaMemset, cudaFree and cudaDeviceSynchronize: every deferred queue of the calling host
//    thread first (the legacy stream waits for all blocking streams; each NCCL rank thread is
//    a device of its own here).
// So a deferred stream runs as late as CUDA allows, and work on another stream that reads its
// results without an event dependency reads them stale, as a GPU may. Work on a stream that is
// not deferred costs one test of a flag more than before; the legacy stream one atomic load.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace emu {
struct EventRecord;
}

struct CUstream_st {
  explicit CUstream_st(int id_) : id(id_) {}
  int id;
  bool deferred = false;
  std::thread::id owner = std::this_thread::get_id();  // whose legacy work runs its queue
  std::deque<std::function<void()>> queue;              // deferred work, oldest first
};
// An event is its latest record, shared with the queued record item (which a destroyed event
// leaves behind, as CUDA lets the work complete).
struct CUevent_st {
  std::shared_ptr<emu::EventRecord> last;  // null until the first cudaEventRecord
};
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;

namespace emu {
struct EventRecord {
  cudaStream_t stream;  // where it is queued; not read once done (the stream may be gone)
  bool done = false;
  double ms = 0.0;  // host time when the stream reached it
};
inline double host_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline long streams_alive = 0, events_alive = 0;

// The deferred streams of every host thread (each run by its owner's legacy-stream work) and the
// DeferStreams in force, under deferred_lock; deferred_count is the legacy stream's fast test.
inline std::mutex deferred_lock;
inline std::vector<cudaStream_t> deferred_streams;
inline std::atomic<int> deferred_count{0};
inline std::set<int> defer_ordinals;
inline long defer_epoch = 0;  // DeferStreams made so far: a thread's ordinals restart at each
inline bool defer_alive = false;

// Runs the oldest item of s's queue (popped first: the item may run other streams' queues).
inline void run_next(cudaStream_t s) {
  std::function<void()> item = std::move(s->queue.front());
  s->queue.pop_front();
  item();
}
inline void run_queue(cudaStream_t s) {
  while (!s->queue.empty()) run_next(s);
}
// Runs r's stream up to and including r (nothing once r is complete).
inline void run_through(const EventRecord& r) {
  while (!r.done) {
    if (r.stream->queue.empty()) die("an event record missing from its stream's queue");
    run_next(r.stream);
  }
}
// Every deferred queue of the calling host thread, in the order they were deferred.
inline void run_thread_queues() {
  if (deferred_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<cudaStream_t> mine;
  {
    const std::lock_guard<std::mutex> g(deferred_lock);
    for (cudaStream_t s : deferred_streams)
      if (s->owner == std::this_thread::get_id()) mine.push_back(s);
  }
  for (cudaStream_t s : mine) run_queue(s);
}

// Work on stream s: queued when s is deferred, else run now (on the legacy stream after every
// deferred queue of the thread). work must own what it reads when it may be queued.
template <class F>
void on_stream(cudaStream_t s, F&& work) {
  if (s && s->deferred) {
    s->queue.emplace_back(std::forward<F>(work));
    return;
  }
  if (!s) run_thread_queues();
  work();
}

inline void set_deferred(cudaStream_t s, bool on) {
  const std::lock_guard<std::mutex> g(deferred_lock);
  s->deferred = on;
  if (on) {
    deferred_streams.push_back(s);
  } else {
    deferred_streams.erase(std::find(deferred_streams.begin(), deferred_streams.end(), s));
  }
  deferred_count.store(int(deferred_streams.size()));
}

// Defers stream s from now on (its queue runs on the host thread that created it), or runs its
// queue and stops deferring it. For unit tests; models use DeferStreams.
inline void defer_stream(cudaStream_t s, bool deferred) {
  if (!s) die("emu::defer_stream: the legacy stream (nullptr) cannot be deferred");
  if (s->deferred == deferred) return;
  if (!deferred) run_queue(s);
  set_deferred(s, deferred);
}

// While alive, a stream is deferred when its creation ordinal on its host thread is in
// `ordinals`: 1 for the thread's first cudaStreamCreate since this object was made, 2 for the
// second, ... (a CUDA backend made on a rank thread creates its compute stream first, its side
// stream second: {1} defers compute streams, {2} side streams). Counted per thread from the
// object's construction, so the main thread of a test binary counts from 1 too. A stream keeps
// the mode it was created in until destroyed. One at a time; make it before the threads whose
// streams it picks create them.
class DeferStreams {
 public:
  explicit DeferStreams(std::set<int> ordinals) {
    const std::lock_guard<std::mutex> g(deferred_lock);
    if (defer_alive) die("emu::DeferStreams: one at a time");
    defer_ordinals = std::move(ordinals);
    ++defer_epoch;
    defer_alive = true;
  }
  ~DeferStreams() {
    const std::lock_guard<std::mutex> g(deferred_lock);
    defer_ordinals.clear();
    defer_alive = false;
  }
  DeferStreams(const DeferStreams&) = delete;
  DeferStreams& operator=(const DeferStreams&) = delete;
};

// Counts a cudaStreamCreate on this thread: whether DeferStreams picks the new stream.
inline bool deferred_at_creation() {
  thread_local long epoch = -1;
  thread_local int created = 0;
  const std::lock_guard<std::mutex> g(deferred_lock);
  if (epoch != defer_epoch) {
    epoch = defer_epoch;
    created = 0;
  }
  ++created;
  return defer_alive && defer_ordinals.count(created) > 0;
}
}  // namespace emu

inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st(int(++emu::streams_alive));
  if (emu::deferred_at_creation()) emu::set_deferred(*s, true);
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaErrorInvalidValue;
  emu::defer_stream(s, false);
  delete s;
  --emu::streams_alive;
  return cudaSuccess;
}
// On the legacy stream: as work there, every deferred queue of the thread.
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s)
    emu::run_queue(s);
  else
    emu::run_thread_queues();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  emu::run_thread_queues();
  return cudaSuccess;
}

inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  ++emu::events_alive;
  return cudaSuccess;
}
// Flags: cudaEventDisableTiming (an event for ordering only; cudaEventElapsedTime refuses it on
// a GPU) is accepted and changes nothing here.
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (flags & ~3u) return cudaErrorInvalidValue;
  return cudaEventCreate(e);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidValue;
  delete e;
  --emu::events_alive;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  if (!e) return cudaErrorInvalidValue;
  auto r = std::make_shared<emu::EventRecord>();
  r->stream = s;
  e->last = r;
  emu::on_stream(s, [r] {
    r->ms = emu::host_ms();
    r->done = true;
  });
  return cudaSuccess;
}
// s waits for e's latest record as of this call. On the legacy stream (nullptr), or on a stream
// not deferred, the recording stream runs through the record now.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags = 0) {
  if (!e || flags != 0) return cudaErrorInvalidValue;
  std::shared_ptr<emu::EventRecord> r = e->last;
  if (!r || r->done || r->stream == s) return cudaSuccess;
  if (s && s->deferred)
    s->queue.emplace_back([r] { emu::run_through(*r); });
  else
    emu::run_through(*r);
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidValue;
  if (e->last) emu::run_through(*e->last);
  return cudaSuccess;
}
// Both events complete first (their streams run through the records).
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b || !a->last || !b->last) return cudaErrorInvalidValue;
  emu::run_through(*a->last);
  emu::run_through(*b->last);
  *ms = float(b->last->ms - a->last->ms);
  return cudaSuccess;
}
