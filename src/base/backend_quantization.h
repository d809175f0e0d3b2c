// The backend's quantization-and-updates family (one of the interfaces Backend joins,
// src/base/backend.h): quantize / dequantize, the activation casts, the optimizer's norm partials
// and its two update entry points (the rule as data: src/base/math/optimizer_rules.h).
#pragma once
#include <cstdint>
#include <vector>

#include "base/math/eco_update.h"
#include "base/math/optimizer_rules.h"
#include "base/math/sum_segment.h"
#include "base/qtensor.h"
#include "base/tensor.h"
#include "base/treatment.h"

namespace eco {

// One tensor of a plain (unquantized) update: param, grad, m (and v where the rule has one) of
// n elements. cols: the parameter's row length (a 1-D parameter: its length), so that a rule
// whose direction stage works on the 2-D parameter sees n / cols whole rows of it.
struct PlainUpdate {
  Tensor param, grad, m, v;
  int64_t n = 0;
  float weight_decay = 0.0f;
  int64_t cols = 0;
};

// How a quantized parameter is updated this step (the treatment's policy and rounding), and
// the key of its SR random stream.
struct QuantizedStep {
  UpdatePolicy policy;
  Rounding rounding;
  uint64_t seed, step;
  uint32_t tensor_id;
};

struct BackendQuantization {
  virtual ~BackendQuantization() = default;
  // out (rows, cols) fp32 = dequant(q).
  virtual void dequantize(const Tensor& out, const QTensor& q) = 0;
  // q = quantize(src (rows, cols) fp32) with q's format and granularity; SR draws are keyed by
  // (seed, step, tensor_id, element index). The weights' way in (ParamStore::set: initialisation
  // and import), not the per-step update. src must be finite: ParamStore::set refuses a
  // non-finite host value before any backend sees it, and the CPU backend checks src again (a
  // data error naming the element); the CUDA kernels encode whatever they are given.
  virtual void quantize(QTensor& q, const Tensor& src, Rounding rounding, uint64_t seed,
                        uint64_t step, uint32_t tensor_id) = 0;
  // out (n) = bf16-rounded in (round to nearest even), kept in fp32.
  virtual void round_to_bf16(const Tensor& out, const Tensor& in, int64_t n) = 0;
  // What the forward does to activations x (N, C) entering a quantized linear, written to out
  // (N, C), which may alias x: None: a copy; Bf16: round; E4M3Row: quantize-dequantize with one
  // scale per row, RTN.
  virtual void cast_activations(const Tensor& out, const Tensor& x, int N, int C,
                                ActCast cast) = 0;

  // ---- optimizer ----------------------------------------------------------------------------
  // out[k] = the sum over i in [segs[k].offset, segs[k].offset + segs[k].length) of
  // double(x[i])^2, for every k (SumSegment: src/base/math/sum_segment.h, elements of x viewed
  // flat). Each segment's sum is computed in an order fixed by its length alone: the same segment
  // asked alone, among others, with any thread count or launch gives the same bits (the caller
  // adds the partials in a fixed order: optim's sharding-independent gradient norm). x: F32 (F64
  // on the CPU gradient-check backend); out: host memory, segs.size() doubles. Empty segs:
  // nothing. A segment outside x is an error naming it (check_sum_segments).
  virtual void sum_squares_segments(const Tensor& x, const std::vector<SumSegment>& segs,
                                    double* out) = 0;
  // The two updates take the rule as data: a RuleStep (src/base/math/optimizer_rules.h: which
  // rule, its hyperparameters and the step's terms), built once per step by the optimizer, which
  // every backend hands unchanged to the rule's element math (with_rule), so that a rule added
  // there runs on every backend with the same bits and no change here.
  // The plain steps of the unquantized tensors ts (param, grad, m, and v where the rule has one,
  // in the backend's dtype), each with its own weight decay (step.weight_decay is replaced by
  // it). CUDA runs them all in one launch.
  virtual void plain_update(const std::vector<PlainUpdate>& ts, const RuleStep& step) = 0;
  // The fused update of a quantized parameter (src/base/math/eco_update.h), one scale group at
  // a time: moments, theta (never stored), new scale, codes, and under ECO the error into m.
  // master is the fp32 master copy (Master policy) or empty; m, v (v where the rule has one) are
  // fp32 or bf16; all of them hold the whole tensor. `rows`: the rows to update (all by default)
  // and the global index of their first element, which keys the SR draws (RowRange): updating
  // the ranges of a partition one by one gives the whole-tensor bits. Block128 ranges start and
  // end on block-row boundaries; a PerTensor tensor takes only all rows.
  virtual void quantized_update(QTensor& q, const Tensor& master, const Tensor& grad,
                                const Tensor& m, const Tensor& v, const RuleStep& step,
                                const QuantizedStep& qs, const RowRange& rows = {}) = 0;
};

// Raises an error naming the first segment of segs that is not inside x's numel() elements
// (a negative offset or length, or one past the end); the backends call it before summing.
void check_sum_segments(const Tensor& x, const std::vector<SumSegment>& segs);

}  // namespace eco
