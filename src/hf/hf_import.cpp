// Import: every check of the tensor list first (config.json, then missing, unexpected, shape,
// dtype), all problems in one message; then each parameter assembled on the host from its HF
// tensors, every value checked finite, and stored. check_hf_import runs the same and stores
// nothing.
#include "hf/hf_import.h"

#include <set>

#include "base/error.h"
#include "base/math/non_finite.h"
#include "base/tensor.h"
#include "hf/hf_checkpoint.h"
#include "hf/hf_codes.h"
#include "hf/hf_config.h"
#include "hf/hf_layout.h"

namespace eco {
namespace {

using Located = HfCheckpoint::Located;

std::string join(const std::vector<std::string>& items, size_t max) {
  std::string out;
  for (size_t k = 0; k < items.size() && k < max; ++k) out += (k ? "; " : "") + items[k];
  if (items.size() > max) out += fmt::format("; and {} more", items.size() - max);
  return out;
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

// The row-major index `flat` of a tensor of `shape` as coordinates.
std::vector<int64_t> coordinates(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> at(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    at[k] = shape[k] > 0 ? flat % shape[k] : 0;
    flat = shape[k] > 0 ? flat / shape[k] : 0;
  }
  return at;
}

// The values `v` of tensor `name` in `file`, of `shape` (row-major), must all be finite; one data
// error naming the file, the tensor and its first non-finite element otherwise. `verb`: "holds",
// or for codes "decodes to".
void require_finite(const SafetensorsFile& file, const std::string& name,
                    const std::vector<int64_t>& shape, const std::vector<float>& v,
                    const char* verb = "holds") {
  if (const NonFinite bad = find_non_finite(v.data(), int64_t(v.size())))
    data_error("model.init_from: {}: tensor '{}' {} {} non-finite value(s), the first ({}) at "
               "element {} (index {} of shape {}): every imported weight must be finite",
               file.path(), clip_for_message(name), verb, bad.count, bad.value, bad.first,
               dims(coordinates(shape, bad.first)), dims(shape));
}

// Where one HF tensor of the layout is in the checkpoint: its values, or its codes and scales.
struct Found {
  std::string name;  // as the checkpoint names it
  const Located* dense = nullptr;
  const Located* codes = nullptr;
  const Located* scales = nullptr;
};

// Places a HF tensor's values (HF orientation) into its rows of the parameter.
void place(const HfTensorMap& t, const std::vector<float>& v, std::vector<float>& param) {
  float* dst = param.data() + t.row0 * t.cols;
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c)
      dst[r * t.cols + c] = v[size_t(t.transposed ? c * t.rows + r : r * t.cols + c)];
}

// The checkpoint matched against the run's model: for every HF tensor of the layout, where it
// is. The constructor refuses a checkpoint whose tensor list or config.json does not fit the
// model (one usage error listing every problem) or whose files are malformed (a data error).
struct ImportPlan {
  ImportPlan(const std::string& dir, const ModelConfig& m, const ParamTable& table);

  HfCheckpoint ck;
  std::vector<HfTensorMap> layout;
  std::vector<Found> found;  // by layout entry
  // Codes (an export made with --codes): the format and granularity the file's metadata names.
  QFormat cf = QFormat::E4M3;
  Granularity cg = Granularity::PerRow;
};

ImportPlan::ImportPlan(const std::string& dir, const ModelConfig& m, const ParamTable& table)
    : ck(dir) {
  if (const auto bad = hf_config_mismatches(ck.config(), m); !bad.empty())
    usage_error("model.init_from: {}/config.json does not describe the run's model: {}", dir,
                join(bad, 20));
  const HfArch arch = hf_arch_of(m);
  layout = hf_tensor_map(m, table);

  const auto& meta = ck.metadata();
  const bool codes_meta = meta.count(kCodesFormatKey) && meta.count(kCodesGranularityKey) &&
                          parse_qformat(meta.at(kCodesFormatKey), cf) &&
                          parse_granularity(meta.at(kCodesGranularityKey), cg);

  std::vector<std::string> problems;
  found.resize(layout.size());
  std::set<std::string> used;
  const auto lookup = [&](const std::string& name) -> std::pair<std::string, const Located*> {
    if (const Located* l = ck.find(name)) return {name, l};
    // GPT-2 checkpoints of the original release name the tensors without "transformer.".
    const std::string bare = name.substr(name.find('.') + 1);
    if (arch == HfArch::Gpt2 && name.starts_with("transformer."))
      if (const Located* l = ck.find(bare)) return {bare, l};
    return {name, nullptr};
  };
  for (size_t k = 0; k < layout.size(); ++k) {
    const HfTensorMap& t = layout[k];
    Found& f = found[k];
    const auto [name, dense] = lookup(t.hf_name);
    f.name = name;
    if (dense) {
      f.dense = dense;
      used.insert(name);
    } else if (const Located* c = ck.find(t.hf_name + kCodesSuffix)) {
      f.codes = c;
      f.scales = ck.find(t.hf_name + kScalesSuffix);
      used.insert(t.hf_name + kCodesSuffix);
      used.insert(t.hf_name + kScalesSuffix);
      if (!f.scales) problems.push_back(fmt::format("missing tensor '{}{}' (beside '{}{}')",
                                                    t.hf_name, kScalesSuffix, t.hf_name,
                                                    kCodesSuffix));
      else if (!codes_meta)
        problems.push_back(fmt::format("'{}{}': the file's __metadata__ does not name the codes' "
                                       "format and granularity ({}, {})",
                                       t.hf_name, kCodesSuffix, kCodesFormatKey,
                                       kCodesGranularityKey));
    } else {
      problems.push_back(fmt::format("missing tensor '{}' (ecotrain's '{}')", t.hf_name,
                                     table.specs[t.param].name));
    }
  }
  for (const auto& [name, where] : ck.tensors()) {
    if (used.count(name) || hf_ignorable(arch, name)) continue;
    if (name == "lm_head.weight" && m.tie_embeddings) continue;  // checked against wte below
    problems.push_back(fmt::format("unexpected tensor '{}' (a {} of the run's config has none)",
                                   clip_for_message(name), hf_architecture(arch)));
  }
  for (size_t k = 0; k < layout.size(); ++k) {
    const HfTensorMap& t = layout[k];
    const Found& f = found[k];
    const std::string ours = fmt::format("ecotrain's '{}' {}", table.specs[t.param].name,
                                         t.rows == table.specs[t.param].shape[0]
                                             ? std::string()
                                             : fmt::format("rows [{}, {})", t.row0,
                                                           t.row0 + t.rows));
    const auto check = [&](const Located* l, const std::string& name,
                           const std::vector<int64_t>& shape, const char* dtypes, bool ok_dtype) {
      if (l->entry->shape != shape)
        problems.push_back(fmt::format("tensor '{}' has shape {}, the run's model expects {} ({})",
                                       name, dims(l->entry->shape), dims(shape), ours));
      if (!ok_dtype)
        problems.push_back(fmt::format("tensor '{}' has dtype {}, expected {}", name,
                                       st_dtype_name(l->entry->dtype), dtypes));
    };
    if (f.dense)
      check(f.dense, f.name, t.hf_shape, "F32, BF16 or F16",
            st_dtype_is_float_weight(f.dense->entry->dtype));
    if (f.codes && f.scales && codes_meta) {
      check(f.codes, t.hf_name + kCodesSuffix, codes_piece_shape(cf, t.rows, t.cols), "U8",
            f.codes->entry->dtype == StDType::U8);
      check(f.scales, t.hf_name + kScalesSuffix, scales_piece_shape(cg, t.rows, t.cols), "F32",
            f.scales->entry->dtype == StDType::F32);
      if (!codes_split_ok(cg, t.row0, t.rows, table.specs[t.param].shape[0]))
        problems.push_back(fmt::format("'{}{}': {} codes cannot be split at row {}", t.hf_name,
                                       kCodesSuffix, granularity_name(cg), t.row0));
    }
  }
  if (!problems.empty())
    usage_error("model.init_from: {}: {} problem(s) with the weights for the run's model: {}", dir,
                problems.size(), join(problems, 20));
}

// One parameter as the checkpoint holds it: its values in ecotrain's layout (codes dequantized)
// and, when every piece of it is codes, those codes and scales in the layout of a whole QTensor
// of the codes' format and granularity.
struct ParamRead {
  std::vector<float> values;
  bool all_codes = true;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

// Reads parameter `s` from its layout entries [k, end): every tensor read is checked finite,
// the per-tensor scales of its codes pieces must agree, and a tied lm_head.weight must equal the
// embedding it reads.
ParamRead read_param(const ImportPlan& p, const ModelConfig& m, const ParamSpec& s, size_t k,
                     size_t end) {
  ParamRead out;
  for (size_t j = k; j < end; ++j) out.all_codes &= !p.found[j].dense;
  QTensor whole;  // the codes' layout (no buffers: insert_codes_piece reads only its shape)
  whole.format = p.cf;
  whole.granularity = p.cg;
  if (out.all_codes) {
    whole.rows = s.shape[0];
    whole.cols = s.shape.size() > 1 ? s.shape[1] : 1;
    out.codes.assign(size_t(code_bytes(p.cf, whole.numel())), 0);
    out.scales.assign(size_t(num_scales(p.cg, whole.rows, whole.cols)), 0.0f);
  }
  out.values.resize(size_t(s.numel()));
  for (size_t j = k; j < end; ++j) {
    const HfTensorMap& t = p.layout[j];
    const Found& f = p.found[j];
    if (f.dense) {
      const std::vector<float> v = f.dense->file->read_floats(*f.dense->entry);
      require_finite(*f.dense->file, f.name, f.dense->entry->shape, v);
      place(t, v, out.values);
      continue;
    }
    const std::string codes_name = t.hf_name + kCodesSuffix;
    const std::vector<char> raw = f.codes->file->read_bytes(*f.codes->entry);
    const auto* c = reinterpret_cast<const uint8_t*>(raw.data());
    const std::vector<float> sc = f.scales->file->read_floats(*f.scales->entry);
    require_finite(*f.scales->file, t.hf_name + kScalesSuffix, f.scales->entry->shape, sc);
    // Codes are (out, in) even where HF stores the weight transposed: rows of the parameter.
    std::vector<float> v = dequantize_codes_piece(p.cf, p.cg, t.rows, t.cols, c, sc.data());
    require_finite(*f.codes->file, codes_name, {t.rows, t.cols}, v, "decodes to");
    if (out.all_codes &&
        !insert_codes_piece(whole, out.codes.data(), out.scales.data(), t.row0, t.rows, c,
                            sc.data(), j == k))
      usage_error("model.init_from: {}: the per-tensor scale of '{}{}' differs from that of the "
                  "other pieces of ecotrain's '{}'",
                  p.ck.dir(), t.hf_name, kScalesSuffix, s.name);
    if (t.transposed) {  // place() wants HF's orientation
      std::vector<float> hf(v.size());
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t col = 0; col < t.cols; ++col)
          hf[size_t(col * t.rows + r)] = v[size_t(r * t.cols + col)];
      v.swap(hf);
    }
    place(t, v, out.values);
  }
  if (s.name == "wte" && m.tie_embeddings) {
    if (const Located* head = p.ck.find("lm_head.weight")) {
      const bool fits = head->entry->shape == std::vector<int64_t>{s.shape[0], s.shape[1]} &&
                        st_dtype_is_float_weight(head->entry->dtype);
      const std::vector<float> v = fits ? head->file->read_floats(*head->entry)
                                        : std::vector<float>();
      if (fits) require_finite(*head->file, "lm_head.weight", head->entry->shape, v);
      if (!fits || v != out.values)
        usage_error("model.init_from: {}: lm_head.weight differs from the embedding, but the "
                    "run ties them (model.tie_embeddings: true)",
                    head->file->path());
    }
  }
  return out;
}

// The layout entries of each parameter: [first, end) (consecutive in the layout).
struct ParamPieces {
  size_t param, first, end;
};
std::vector<ParamPieces> pieces_by_param(const std::vector<HfTensorMap>& layout) {
  std::vector<ParamPieces> out;
  for (size_t k = 0; k < layout.size();) {
    size_t end = k;
    while (end < layout.size() && layout[end].param == layout[k].param) ++end;
    out.push_back({layout[k].param, k, end});
    k = end;
  }
  return out;
}

}  // namespace

void check_hf_import(const std::string& dir, const ModelConfig& m) {
  const ParamTable table = build_param_table(m);
  const ImportPlan plan(dir, m, table);
  for (const ParamPieces& pp : pieces_by_param(plan.layout))
    read_param(plan, m, table.specs[pp.param], pp.first, pp.end);
}

void import_hf(const std::string& dir, const ModelConfig& m, ParamStore& store) {
  const ParamTable& table = store.table();
  const ImportPlan plan(dir, m, table);
  for (const ParamPieces& pp : pieces_by_param(plan.layout)) {
    const size_t i = pp.param;
    if (!store.present(i)) continue;  // another rank's expert
    const ParamRead read = read_param(plan, m, table.specs[i], pp.first, pp.end);
    const QTensor* q = store.quantized(i) ? &store.qtensor(i) : nullptr;
    if (read.all_codes && q && q->format == plan.cf && q->granularity == plan.cg) {
      store.set_codes(i, read.codes.data(), read.scales.data());  // no requantization
    } else if (!q && store.value(i).dtype == DType::F64) {
      const std::vector<double> wide(read.values.begin(), read.values.end());
      store.set(i, wide.data());
    } else {
      store.set(i, read.values.data());
    }
  }
}

}  // namespace eco
