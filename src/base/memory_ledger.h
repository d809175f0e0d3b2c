// The memory ledger: every persistent allocation, by category, so a run can report what each
// treatment costs (bytes per parameter) and tests can assert the totals.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace eco {

enum class MemCategory : uint8_t {
  Weights,      // trainable weights in their training precision (fp32 on the CPU reference)
  QuantCodes,   // quantized weight codes (FP8 / INT4)
  Scales,       // quantization scales
  Master,       // high-precision master copies
  OptState,     // optimizer moments
  Grads,        // parameter gradients
  Activations,  // forward activations kept for backward
  Workspace,    // scratch (backward temporaries, logits, GEMM workspace)
  Padding,      // alignment gaps between the tensors of a parameter or optimizer-state arena
  Count
};
const char* mem_category_name(MemCategory c);

class MemoryLedger {
 public:
  struct Entry {
    std::string name;
    MemCategory category;
    uint64_t bytes;
    bool quantizable_param;  // belongs to a quantizable parameter (block linear)
  };

  void record(std::string name, MemCategory category, uint64_t bytes,
              bool quantizable_param = false);
  // Replaces the last entry (one allocation holding several tensors: an arena) by the entries of
  // its parts, whose bytes must add up to its bytes; the categories are the parts'.
  void split_last(std::vector<Entry> parts);
  uint64_t total(MemCategory c) const { return totals_[size_t(c)]; }
  uint64_t total() const;
  // Static memory as the ECO paper counts it: weights (codes + scales + master) + optimizer state.
  uint64_t static_bytes() const;
  // The same, counting only allocations that belong to quantizable parameters (block linears):
  // divided by their element count this is the paper's "static bytes per quantized parameter".
  uint64_t static_bytes_quantizable() const;
  const std::vector<Entry>& entries() const { return entries_; }
  // A printable table of the categories (bytes, MiB, share).
  std::string table() const;

 private:
  std::vector<Entry> entries_;
  std::array<uint64_t, size_t(MemCategory::Count)> totals_{};
};

}  // namespace eco
