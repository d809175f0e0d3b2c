// Import: every check first (config.json, then the tensor list: missing, unexpected, shape,
// dtype), all problems in one message; then each parameter assembled on the host from its HF
// tensors and stored.
#include "hf/hf_import.h"

#include <set>

#include "base/error.h"
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

}  // namespace

void import_hf(const std::string& dir, const ModelConfig& m, ParamStore& store) {
  const HfCheckpoint ck(dir);
  if (const auto bad = hf_config_mismatches(ck.config(), m); !bad.empty())
    usage_error("model.init_from: {}/config.json does not describe the run's model: {}", dir,
                join(bad, 20));
  const HfArch arch = hf_arch_of(m);
  const ParamTable& table = store.table();
  const std::vector<HfTensorMap> layout = hf_tensor_map(m, table);

  // Codes (an export made with --codes): the format and granularity the file's metadata names.
  QFormat cf = QFormat::E4M3;
  Granularity cg = Granularity::PerRow;
  const auto& meta = ck.metadata();
  const bool codes_meta = meta.count(kCodesFormatKey) && meta.count(kCodesGranularityKey) &&
                          parse_qformat(meta.at(kCodesFormatKey), cf) &&
                          parse_granularity(meta.at(kCodesGranularityKey), cg);

  std::vector<std::string> problems;
  std::vector<Found> found(layout.size());
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

  // Each parameter from its pieces (they are consecutive in the layout).
  for (size_t k = 0; k < layout.size();) {
    const size_t i = layout[k].param;
    size_t end = k;
    bool all_codes = true;
    for (; end < layout.size() && layout[end].param == i; ++end) all_codes &= !found[end].dense;
    const ParamSpec& s = table.specs[i];
    if (!store.present(i)) {  // another rank's expert
      k = end;
      continue;
    }
    const QTensor* q = store.quantized(i) ? &store.qtensor(i) : nullptr;
    if (all_codes && q && q->format == cf && q->granularity == cg) {
      // The codes themselves: no requantization.
      std::vector<uint8_t> codes(size_t(code_bytes(cf, q->numel())), 0);
      std::vector<float> scales(size_t(num_scales(cg, q->rows, q->cols)));
      for (size_t j = k; j < end; ++j) {
        const HfTensorMap& t = layout[j];
        const std::vector<char> c = found[j].codes->file->read_bytes(*found[j].codes->entry);
        const std::vector<float> sc = found[j].scales->file->read_floats(*found[j].scales->entry);
        if (!insert_codes_piece(*q, codes.data(), scales.data(), t.row0, t.rows,
                                reinterpret_cast<const uint8_t*>(c.data()), sc.data(), j == k))
          usage_error("model.init_from: {}: the per-tensor scale of '{}{}' differs from that of "
                      "the other pieces of ecotrain's '{}'",
                      dir, t.hf_name, kScalesSuffix, s.name);
      }
      store.set_codes(i, codes.data(), scales.data());
      k = end;
      continue;
    }
    std::vector<float> values(size_t(s.numel()));
    for (size_t j = k; j < end; ++j) {
      const HfTensorMap& t = layout[j];
      const Found& f = found[j];
      if (f.dense) {
        place(t, f.dense->file->read_floats(*f.dense->entry), values);
      } else {
        const std::vector<char> c = f.codes->file->read_bytes(*f.codes->entry);
        const std::vector<float> sc = f.scales->file->read_floats(*f.scales->entry);
        std::vector<float> v = dequantize_codes_piece(
            cf, cg, t.rows, t.cols, reinterpret_cast<const uint8_t*>(c.data()), sc.data());
        if (t.transposed) {  // codes are (out, in): place() wants HF's orientation
          std::vector<float> hf(v.size());
          for (int64_t r = 0; r < t.rows; ++r)
            for (int64_t col = 0; col < t.cols; ++col)
              hf[size_t(col * t.rows + r)] = v[size_t(r * t.cols + col)];
          v.swap(hf);
        }
        place(t, v, values);
      }
    }
    if (s.name == "wte" && m.tie_embeddings) {
      if (const Located* head = ck.find("lm_head.weight")) {
        if (head->entry->shape != std::vector<int64_t>{s.shape[0], s.shape[1]} ||
            !st_dtype_is_float_weight(head->entry->dtype) ||
            head->file->read_floats(*head->entry) != values)
          usage_error("model.init_from: {}: lm_head.weight differs from the embedding, but the "
                      "run ties them (model.tie_embeddings: true)",
                      dir);
      }
    }
    if (!q && store.value(i).dtype == DType::F64) {
      const std::vector<double> wide(values.begin(), values.end());
      store.set(i, wide.data());
    } else {
      store.set(i, values.data());
    }
    k = end;
  }
}

}  // namespace eco
