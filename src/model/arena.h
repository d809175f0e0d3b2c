// Arenas: one allocation holding many tensors of one storage kind (parameter values, quantized
// codes, scales, optimizer moments), each tensor a view at an offset recorded in a table, so
// that a collective can move a whole buffer in one call.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/memory_ledger.h"
#include "base/tensor.h"

namespace eco {

class Backend;

// Every tensor of an arena starts at a multiple of this many bytes: the CPU allocator's and a
// cache line's alignment, so each view is as aligned as a separate allocation was (the CPU and
// CUDA kernels that pick a vector path by alignment, float4 / uint4 loads, take the same one).
constexpr int64_t kArenaAlignBytes = 64;

// One tensor of an arena: its name, element offset in the arena's buffer, and shape.
struct ArenaSlot {
  std::string name;
  int64_t offset = 0;  // in elements of the arena's dtype
  std::vector<int64_t> shape;
  MemCategory category = MemCategory::Weights;
  bool quantizable_param = false;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

struct Arena {
  std::string name;
  Tensor buffer;                // the whole allocation, shape {elements}; empty when no slots
  std::vector<ArenaSlot> slots;  // in offset order
  int64_t padding = 0;          // elements of alignment gaps (the ledger's arena_padding line)

  Tensor view(size_t slot) const { return buffer.slice(slots[slot].offset, slots[slot].shape); }
  int64_t elements() const { return buffer.empty() ? 0 : buffer.numel(); }
};

// Collects the tensors of one arena, then allocates it once.
class ArenaBuilder {
 public:
  ArenaBuilder(std::string name, DType dtype) : name_(std::move(name)), dtype_(dtype) {}
  // Reserves a tensor; returns its slot index (Arena::view).
  size_t add(std::string name, std::vector<int64_t> shape, MemCategory category,
             bool quantizable_param = false);
  bool empty() const { return slots_.empty(); }
  const std::string& name() const { return name_; }
  // One backend allocation of all slots (zero-filled); the ledger gets one entry per tensor, as
  // separate allocations would have, plus one arena_padding entry for the alignment gaps.
  Arena allocate(Backend& be) const;

 private:
  std::string name_;
  DType dtype_;
  std::vector<ArenaSlot> slots_;
  int64_t end_ = 0;
  int64_t padding_ = 0;
};

}  // namespace eco
