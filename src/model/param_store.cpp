// ParamStore: per-parameter storage under a treatment, compute views, init and state listing.
#include "model/param_store.h"

#include <algorithm>

#include "base/error.h"
#include "base/math/non_finite.h"
#include "core/rng.h"

namespace eco {

ParamStore::ParamStore(const ParamTable& table, const Treatment& treatment, Backend& be,
                       QuantizeScope scope, std::vector<char> absent)
    : table_(table), treatment_(treatment), scope_(scope), be_(be), value_(table.specs.size()),
      qt_(table.specs.size()), absent_(std::move(absent)) {
  ECO_ASSERT(absent_.empty() || absent_.size() == table.specs.size(),
             "param store: {} absence flags for {} parameters", absent_.size(),
             table.specs.size());
  for (size_t i = 0; i < table.specs.size(); ++i) {
    grad_offset_.push_back(present(i) ? grad_total_ : -1);
    if (present(i)) grad_total_ += table.specs[i].numel();
  }
  const bool quantizing = treatment_.quantized || treatment_.bf16_weights;
  if (quantizing && be_.dtype() != DType::F32)
    usage_error("precision.treatment '{}' runs in fp32 on this backend, not {}", treatment_.name,
                dtype_name(be_.dtype()));
  ArenaBuilder values("parameter values", be_.dtype()), codes("quantized codes", DType::U8),
      scales("quantization scales", DType::F32);
  constexpr size_t kNone = size_t(-1);
  std::vector<size_t> value_slot(table.specs.size(), kNone), code_slot(value_slot);
  int64_t largest = 0;
  for (size_t i = 0; i < table.specs.size(); ++i) {
    const ParamSpec& s = table.specs[i];
    const ParamStorage& st = storage_.emplace_back(
        storage_policy(treatment_, scope_, {s.quantizable, s.role == ParamRole::Expert}));
    if (!present(i)) continue;  // its zero-size tensors come below
    if (st.quantized) {
      const int64_t rows = s.shape[0], cols = s.shape[1];
      code_slot[i] = codes.add(s.name + ".codes", {code_bytes(st.format, rows * cols)},
                               MemCategory::QuantCodes, true);
      scales.add(s.name + ".scales", {num_scales(st.granularity, rows, cols)},
                 MemCategory::Scales, true);
    }
    if (st.value)
      value_slot[i] = values.add(s.name + (st.master ? ".master" : ""), s.shape,
                                 st.master ? MemCategory::Master : MemCategory::Weights,
                                 in_scope(i));
    // The scratch that compute views (dequantized or bf16-rounded weights) are written to.
    if (st.quantized || st.bf16_compute) largest = std::max(largest, s.numel());
  }
  arenas_[size_t(ParamArena::Values)] = values.allocate(be_);
  arenas_[size_t(ParamArena::Codes)] = codes.allocate(be_);
  arenas_[size_t(ParamArena::Scales)] = scales.allocate(be_);
  for (size_t i = 0; i < table.specs.size(); ++i) {
    if (!present(i)) {
      if (storage_[i].value) value_[i] = Tensor{nullptr, {0}, be_.dtype()};
      if (storage_[i].quantized) {
        QTensor t;
        t.format = storage_[i].format;
        t.granularity = storage_[i].granularity;
        t.rows = table.specs[i].shape[0];
        t.cols = table.specs[i].shape[1];
        t.codes = Tensor{nullptr, {0}, DType::U8};
        t.scales = Tensor{nullptr, {0}, DType::F32};
        qt_[i] = t;
      }
      continue;
    }
    if (value_slot[i] != kNone) value_[i] = arena(ParamArena::Values).view(value_slot[i]);
    if (code_slot[i] == kNone) continue;
    // A QTensor's codes and scales have the same slot index in their two arenas.
    QTensor t;
    t.format = storage_[i].format;
    t.granularity = storage_[i].granularity;
    t.rows = table.specs[i].shape[0];
    t.cols = table.specs[i].shape[1];
    t.codes = arena(ParamArena::Codes).view(code_slot[i]);
    t.scales = arena(ParamArena::Scales).view(code_slot[i]);
    check_qtensor_layout(t);
    qt_[i] = t;
  }
  if (largest > 0)
    scratch_ = be_.alloc("dequantized_weight_scratch", {largest}, DType::F32,
                         MemCategory::Workspace);
}

bool ParamStore::in_scope(size_t i) const {
  const ParamSpec& s = table_.specs[i];
  return in_quantize_scope(scope_, {s.quantizable, s.role == ParamRole::Expert});
}

int64_t ParamStore::count_in_scope() const {
  int64_t n = 0;
  for (size_t i = 0; i < table_.specs.size(); ++i)
    if (in_scope(i)) n += table_.specs[i].numel();
  return n;
}

Tensor ParamStore::compute(size_t i) {
  const ParamSpec& s = table_.specs[i];
  ECO_ASSERT(present(i), "parameter '{}' is another rank's (expert parallelism)", s.name);
  if (quantized(i)) {
    const Tensor out = scratch_.slice(0, s.shape);
    be_.dequantize(out, *qt_[i]);
    return out;
  }
  // bf16 weights (bf16-mw): the master rounded to bf16, unless the backend's GEMMs round it.
  if (storage_[i].bf16_compute && !be_.gemm_rounds_weights_to_bf16()) {
    const Tensor out = scratch_.slice(0, s.shape);
    be_.round_to_bf16(out, value_[i], s.numel());
    return out;
  }
  return value_[i];
}

ParamStore::LinearWeight ParamStore::linear_weight(size_t i) {
  const ActCast act = storage_[i].act;
  if (!quantized(i)) return {nullptr, Tensor{}, compute(i), act};
  return {&*qt_[i], scratch_.slice(0, table_.specs[i].shape), Tensor{}, act};
}

void ParamStore::init(uint64_t seed) {
  for (size_t i = 0; i < table_.specs.size(); ++i) {
    const auto& s = table_.specs[i];
    if (!present(i)) continue;  // its owner draws the same stream (keyed by i)
    // One stream per parameter, so adding a parameter does not shift the others' values.
    Rng rng(seed * 0x100000001B3ull + i);
    std::vector<double> host(size_t(s.numel()));
    for (auto& h : host) h = s.init_std > 0 ? s.init_std * rng.normal() : s.init_value;
    if (be_.dtype() == DType::F64 && !quantized(i)) {
      set(i, host.data());
    } else {
      std::vector<float> f(host.begin(), host.end());
      set(i, f.data());
    }
  }
}

void ParamStore::set(size_t i, const void* host) {
  ECO_ASSERT(present(i), "set: parameter '{}' is another rank's", table_.specs[i].name);
  // Quantized parameters take fp32 host values (the treatment runs in fp32: the constructor).
  if (quantized(i))
    if (const NonFinite bad = find_non_finite(static_cast<const float*>(host), qt_[i]->numel()))
      data_error("parameter '{}': element {} is {} ({} non-finite in all): a non-finite value has "
                 "no {} code, and nothing was stored",
                 table_.specs[i].name, bad.first, bad.value, bad.count,
                 qformat_name(qt_[i]->format));
  if (!value_[i].empty()) be_.copy_from_host(value_[i], host);
  if (quantized(i)) {
    if (!value_[i].empty()) {
      be_.quantize(*qt_[i], value_[i], Rounding::RTN, 0, 0, uint32_t(i));
    } else {
      // No master: quantize the host values through the scratch.
      const Tensor tmp = scratch_.slice(0, table_.specs[i].shape);
      be_.copy_from_host(tmp, host);
      be_.quantize(*qt_[i], tmp, Rounding::RTN, 0, 0, uint32_t(i));
    }
  }
}

void ParamStore::get(size_t i, void* host) {
  ECO_ASSERT(present(i), "get: parameter '{}' is another rank's", table_.specs[i].name);
  if (quantized(i) && value_[i].empty()) {
    const Tensor tmp = compute(i);
    be_.copy_to_host(host, tmp);
  } else {
    be_.copy_to_host(host, value_[i]);
  }
}

void ParamStore::set_codes(size_t i, const uint8_t* codes, const float* scales) {
  ECO_ASSERT(present(i) && quantized(i), "set_codes: parameter '{}' is not a quantized one here",
             table_.specs[i].name);
  QTensor& q = *qt_[i];
  be_.copy_from_host(q.codes, codes);
  be_.copy_from_host(q.scales, scales);
  if (!value_[i].empty()) be_.dequantize(value_[i], q);
}

void ParamStore::get_codes(size_t i, uint8_t* codes, float* scales) {
  ECO_ASSERT(present(i) && quantized(i), "get_codes: parameter '{}' is not a quantized one here",
             table_.specs[i].name);
  be_.copy_to_host(codes, qt_[i]->codes);
  be_.copy_to_host(scales, qt_[i]->scales);
}

std::vector<std::pair<std::string, Tensor>> ParamStore::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < table_.specs.size(); ++i) {
    const auto& name = table_.specs[i].name;
    if (storage_[i].value) out.emplace_back(name, value_[i]);
    if (qt_[i]) {
      out.emplace_back(name + ".codes", qt_[i]->codes);
      out.emplace_back(name + ".scales", qt_[i]->scales);
    }
  }
  return out;
}

std::vector<ParamStore::StateEntry> ParamStore::state_layout() const {
  std::vector<StateEntry> out;
  for (size_t i = 0; i < table_.specs.size(); ++i) {
    const ParamSpec& s = table_.specs[i];
    if (storage_[i].value) out.push_back({i, s.numel() * int64_t(dtype_size(be_.dtype()))});
    if (qt_[i]) {
      const QTensor& q = *qt_[i];
      out.push_back({i, code_bytes(q.format, q.rows * q.cols)});
      out.push_back({i, num_scales(q.granularity, q.rows, q.cols) * int64_t(sizeof(float))});
    }
  }
  return out;
}

}  // namespace eco
