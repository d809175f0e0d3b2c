// ParamStore: the parameters' memory, laid out as the storage policy (quant/storage_policy.h)
// says for the run's treatment and quantization scope. Plain parameters (and every parameter
// under fp32) are one tensor in the backend dtype; block linears under a quantized treatment are
// a QTensor (codes + scales), plus a fp32 master under *-mw-*. Each storage kind is one arena
// (model/arena.h). The forward and backward ask for a compute view; nothing else knows how a
// weight is stored.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/arena.h"
#include "base/backend.h"
#include "model/param_table.h"
#include "base/treatment.h"
#include "quant/storage_policy.h"

namespace eco {

// The storage kinds, one arena each: values (plain parameters and masters, backend dtype),
// codes (every QTensor's code bytes, u8), scales (every QTensor's scales, fp32).
enum class ParamArena : uint8_t { Values, Codes, Scales };

class ParamStore {
 public:
  // absent (empty, or one flag per parameter): parameters this rank does not hold (expert
  // parallelism: other ranks' experts). They keep their storage kind (storage(), quantized())
  // but get zero-size tensors: no memory, no init, and zero-byte entries in state().
  ParamStore(const ParamTable& table, const Treatment& treatment, Backend& backend,
             QuantizeScope scope = QuantizeScope::Blocks, std::vector<char> absent = {});

  const ParamTable& table() const { return table_; }
  const Treatment& treatment() const { return treatment_; }
  QuantizeScope scope() const { return scope_; }
  // How parameter i is stored (the storage policy's answer for its spec).
  const ParamStorage& storage(size_t i) const { return storage_[i]; }
  // One storage kind's whole buffer and its table of tensors (name, offset, shape).
  const Arena& arena(ParamArena kind) const { return arenas_[size_t(kind)]; }
  size_t size() const { return table_.specs.size(); }
  // Whether the treatment reaches parameter i: quantizable and inside the quantize scope
  // (in_quantize_scope); the memory figures "per quantized parameter" count these.
  bool in_scope(size_t i) const;
  // Elements of the parameters in scope (all quantizable ones under quantize: blocks).
  int64_t count_in_scope() const;
  // Stored as codes + scales (a block linear under a quantized treatment).
  bool quantized(size_t i) const { return qt_[i].has_value(); }
  // The trainable high-precision tensor: the parameter itself, or the master copy of a
  // quantized one (mw treatments). Empty for quantized parameters without a master.
  const Tensor& value(size_t i) const { return value_[i]; }
  QTensor& qtensor(size_t i) { return *qt_[i]; }

  // The value the forward and backward use now: the parameter itself, or (quantized / bf16
  // weights) a dequantized copy in a shared scratch that is valid until the next compute() call.
  Tensor compute(size_t i);

  // A weight as a linear layer's GEMMs read it (Transformer::linear_forward / linear_backward).
  // Stored quantized: `quantized` points at the QTensor (the only copy the forward may use), and
  // `scratch` is a fp32 view of the weight's shape on the buffer compute() uses, which the
  // backend may dequantize into (Backend::quantized_linear_forward / _backward). Otherwise
  // `quantized` is null and `dense` is compute(i). This is storage, not the treatment: the
  // caller picks the Backend operation by whether `quantized` is set, never by treatment name.
  // Valid until the next compute() or linear_weight() call (they share the scratch).
  struct LinearWeight {
    const QTensor* quantized = nullptr;
    Tensor scratch;  // with quantized
    Tensor dense;    // without
    ActCast act = ActCast::None;  // the cast of this linear's input (ParamStorage::act)
  };
  LinearWeight linear_weight(size_t i);

  // GPT-2 initialisation (normal(0, init_std) or constants), then quantization (RTN) where stored
  // quantized. Deterministic for a seed.
  void init(uint64_t seed);
  // Set / read parameter i from host values in the backend dtype (for quantized parameters:
  // float values, quantized RTN on set; dequantized on get). A quantized parameter's values must
  // be finite: a NaN or an infinity is a data error naming the parameter and the element, and
  // nothing is stored (on either backend).
  void set(size_t i, const void* host);
  void get(size_t i, void* host);
  // Set quantized parameter i from host codes and scales in its own layout (qtensor(i)'s format,
  // granularity and sizes): an exact copy, no requantization. A master copy (mw treatments)
  // becomes the dequantized weight.
  void set_codes(size_t i, const uint8_t* codes, const float* scales);
  // Read quantized parameter i's codes and scales to host buffers of its layout's sizes.
  void get_codes(size_t i, uint8_t* codes, float* scales);

  // Whether this rank holds parameter i (see the constructor's `absent`).
  bool present(size_t i) const { return absent_.empty() || !absent_[i]; }
  // The flat gradient's layout: the present parameters in table order, each at its grad_offset
  // (spec.offset when every parameter is present; -1 for an absent one, which has no gradient
  // here), grad_total() elements in all.
  int64_t grad_offset(size_t i) const { return grad_offset_[i]; }
  int64_t grad_total() const { return grad_total_; }

  // Every persistent tensor, named, for checkpoints (an absent parameter's are zero-size).
  std::vector<std::pair<std::string, Tensor>> state() const;
  // For each state() entry: its parameter and the bytes of the whole tensor (what a present
  // parameter's entry holds).
  struct StateEntry {
    size_t param;
    int64_t whole_bytes;
  };
  std::vector<StateEntry> state_layout() const;

 private:
  const ParamTable& table_;
  Treatment treatment_;
  QuantizeScope scope_;
  Backend& be_;
  Arena arenas_[3];  // by ParamArena
  std::vector<ParamStorage> storage_;  // per parameter, from the storage policy
  std::vector<Tensor> value_;
  std::vector<std::optional<QTensor>> qt_;
  Tensor scratch_;  // fp32, the largest block linear
  std::vector<char> absent_;  // empty: every parameter present
  std::vector<int64_t> grad_offset_;
  int64_t grad_total_ = 0;
};

}  // namespace eco
