// The backend's device family (one of the interfaces Backend joins, src/base/backend.h): what the
// backend is (name, dtypes), its workspaces, streams and events, profiling, and memory: buffers,
// zeroing, copies and the gradient accumulation's add.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/math/bf16.h"
#include "base/memory_ledger.h"
#include "base/tensor.h"

namespace eco {

// The largest shapes a model runs, reported once by the Transformer (reserve_workspaces).
struct WorkspaceShapes {
  int64_t tokens = 0;             // B * T rows of activations
  int seq_len = 0, d_model = 0, n_head = 0, vocab = 0;
  int head_dim = 0;               // the attention's head size; 0: d_model / n_head
  // Whether some layer runs plain multi-head attention (AttentionShape::plain: the paths with a
  // score workspace take only those); the others run grouped-query / windowed attention.
  bool plain_attention = true;
  int64_t widest_linear_in = 0;   // the largest C of a block linear's input (d_model or mlp hidden)
  int64_t widest_linear_out = 0;  // the largest OC of a block linear (3 d_model or the mlp's fc)
  int64_t largest_weight = 0;     // elements of the largest weight any GEMM reads (the head's)
  bool fp8_activations = false;   // the forward casts block-linear inputs to E4M3 per row
  // Width of the attention's output rows, n_head x head size (the C of plain attention).
  int attention_width() const { return n_head * (head_dim > 0 ? head_dim : d_model / n_head); }
};

struct BackendDevice {
  virtual ~BackendDevice() = default;
  virtual std::string name() const = 0;
  // Whether tensors live in host memory (a collective can then work on them in place; device
  // memory goes through copies or a device communicator).
  virtual bool host_memory() const { return false; }
  // dtype of parameters, parameter gradients, plain optimizer state, the saved statistics of
  // norms and attention (mean, rstd, attention state) and the per-token losses.
  virtual DType dtype() const = 0;
  // dtype of activations, their gradients (backward scratch) and logits: dtype() on the CPU
  // reference, bf16 on CUDA.
  virtual DType act_dtype() const { return dtype(); }
  // Called once by the model with its largest shapes: a backend that keeps workspaces for them
  // (CUDA: attention scores, padded logits, bf16 weight copies, FP8 activation codes) allocates
  // them now, so the ledger (and --plan) has them from the start and they never grow mid-run.
  virtual void reserve_workspaces(const WorkspaceShapes& /*shapes*/) {}
  // What a plan cannot put in the ledger (the planning backend of --plan: memory that depends on
  // the device found at run time), one line each; empty for a backend that runs.
  virtual std::vector<std::string> plan_notes() const { return {}; }

  // ---- streams and events ---------------------------------------------------------------------
  // Wait for all queued work (timing). Operations that return host values synchronise anyway.
  virtual void synchronize() {}
  // A second stream of device work beside the one every operation runs on (the compute stream):
  // parallel.overlap's gradient sums run there on a GPU (NCCL, DeviceCommunicator::Lane::Side)
  // while the compute stream goes on with the backward. The two are ordered only by these calls:
  // side_fork: the side stream's next work waits for everything enqueued on the compute stream
  // so far; side_join: the compute stream's next work waits for everything enqueued on the side
  // stream so far (then synchronize() waits for both). Host backends have none: they run
  // everything in call order, and both calls do nothing.
  virtual bool has_side_stream() const { return false; }
  virtual void side_fork() {}
  virtual void side_join() {}

  // ---- profiling ------------------------------------------------------------------------------
  // A named range around a piece of work (a layer's forward, the optimizer step, data loading):
  // NVTX ranges on CUDA, shown by Nsight Systems; nothing on the CPU. Use ScopedRange.
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}
  // Per-operation timing for the ms/step breakdown. While enabled, every backend operation is
  // timed on the device and summed by operation name; take_profile() returns the totals since
  // enabling or since the last take (largest first) and resets them. Backends without it return
  // nothing.
  struct OpTime {
    std::string name;
    int64_t calls;
    double ms;
  };
  virtual bool supports_profiling() const { return false; }
  virtual void set_profiling(bool /*on*/) {}
  virtual std::vector<OpTime> take_profile() { return {}; }

  // ---- memory -------------------------------------------------------------------------------
  // Allocate a zero-filled tensor that lives as long as the backend; recorded in the backend's
  // ledger (quantizable_param: it belongs to a block linear, for the per-quantized-parameter
  // figures).
  virtual Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
                       MemCategory category, bool quantizable_param = false) = 0;
  virtual void zero(const Tensor& t) = 0;
  // acc (n) = acc + x, element by element in the parameter dtype (the trainer's gradient
  // accumulation: one rounding per addition, in the order the caller adds).
  virtual void add_inplace(const Tensor& acc, const Tensor& x, int64_t n) = 0;
  // Raw copies in the tensor's own dtype.
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
};

// A range for the scope's lifetime (BackendDevice::range_push / range_pop).
class ScopedRange {
 public:
  ScopedRange(BackendDevice& be, const char* name) : be_(be) { be_.range_push(name); }
  ~ScopedRange() { be_.range_pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  BackendDevice& be_;
};

// A F32, F64 or BF16 tensor copied to the host as floats (logits for sampling, tests).
inline std::vector<float> to_host_floats(BackendDevice& be, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::F32) {
    be.copy_to_host(out.data(), t);
  } else if (t.dtype == DType::BF16) {
    std::vector<uint16_t> bits(out.size());
    be.copy_to_host(bits.data(), t);
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
  } else if (t.dtype == DType::F64) {
    std::vector<double> d(out.size());
    be.copy_to_host(d.data(), t);
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(d[i]);
  } else {
    throw std::invalid_argument(std::string("to_host_floats: unsupported dtype ") +
                                dtype_name(t.dtype));
  }
  return out;
}

}  // namespace eco
