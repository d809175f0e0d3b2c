// Export: the checkpoint's model tensors are restored into a ParamStore on the CPU (so that every
// treatment's storage is read by the code that wrote it), then each HF tensor is cut from its
// parameter (rows, transposition) and converted, one tensor at a time, as the writer asks.
#include "hf/hf_export.h"

#include <filesystem>
#include <memory>

#include "base/error.h"
#include "hf/hf_codes.h"
#include "hf/hf_config.h"
#include "hf/hf_layout.h"
#include "base/math/bf16.h"
#include "base/backend.h"
#include "model/param_store.h"
#include "train/checkpoint.h"
#include "train/metrics.h"

namespace eco {
namespace fs = std::filesystem;
namespace {

// Rows [t.row0, t.row0 + t.rows) of a (.., t.cols) row-major parameter, in HF's orientation.
std::vector<float> hf_values(const HfTensorMap& t, const std::vector<float>& param) {
  std::vector<float> out(size_t(t.rows * t.cols));
  const float* src = param.data() + t.row0 * t.cols;
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c)
      out[size_t(t.transposed ? c * t.rows + r : r * t.cols + c)] = src[r * t.cols + c];
  return out;
}

void write_as(StDType dtype, const std::vector<float>& v, char* dst) {
  if (dtype == StDType::F32) {
    std::memcpy(dst, v.data(), v.size() * 4);
    return;
  }
  for (size_t k = 0; k < v.size(); ++k) {
    const uint16_t b = float_to_bf16(v[k]);
    std::memcpy(dst + 2 * k, &b, 2);
  }
}

// The checkpoint's model, restored on a CPU backend; parameters read whole on demand, the last
// one kept (q, k and v, or gate and up, are cut from one parameter).
class CheckpointModel {
 public:
  CheckpointModel(const std::string& path)
      : st_(load_checkpoint(path)),
        // threads: the checkpoint's machine may have had more cores than this one; init_from:
        // the directory the run started from need not exist any more.
        cfg_(parse_config(st_.config_yaml, path + " (its resolved config)",
                          {"train.threads=0", "model.init_from=\"\""})),
        table_(build_param_table(cfg_.model)),
        be_(make_cpu_backend(DType::F32)),
        store_(std::make_unique<ParamStore>(table_, cfg_.precision.treatment, *be_,
                                            cfg_.precision.quantize)) {
    for (const auto& [name, t] : store_->state()) {
      const std::vector<char>& blob = st_.section(name, path);
      if (blob.size() != t.bytes())
        runtime_error("{}: section '{}' has {} bytes, its model needs {}", path, name,
                      blob.size(), t.bytes());
      be_->copy_from_host(t, blob.data());
    }
  }
  const Config& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  ParamStore& store() { return *store_; }
  const std::vector<float>& values(size_t i) {
    if (cached_ != i) {
      cache_.resize(size_t(table_.specs[i].numel()));
      store_->get(i, cache_.data());
      cached_ = i;
    }
    return cache_;
  }

 private:
  CheckpointState st_;
  Config cfg_;
  ParamTable table_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<ParamStore> store_;
  size_t cached_ = size_t(-1);
  std::vector<float> cache_;
};

}  // namespace

std::vector<std::string> export_hf(const std::string& checkpoint, const HfExportOptions& opts) {
  ECO_ASSERT(opts.dtype == StDType::F32 || opts.dtype == StDType::BF16, "export dtype {}",
             st_dtype_name(opts.dtype));
  if (opts.shard_bytes == 0) usage_error("--shard-size must be positive");
  auto model = std::make_shared<CheckpointModel>(checkpoint);
  const ModelConfig& m = model->config().model;
  const std::vector<HfTensorMap> layout = hf_tensor_map(m, model->table());
  ParamStore& store = model->store();

  std::vector<SafetensorsOutput> tensors;
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  bool wrote_codes = false;
  for (const HfTensorMap& t : layout) {
    if (!(opts.codes && store.quantized(t.param))) {
      tensors.push_back({t.hf_name, opts.dtype, t.hf_shape, [model, t, dtype = opts.dtype](char* dst) {
                           write_as(dtype, hf_values(t, model->values(t.param)), dst);
                         }});
      continue;
    }
    QTensor q = store.qtensor(t.param);
    if (!codes_split_ok(q.granularity, t.row0, t.rows, q.rows))
      usage_error("--codes: '{}' is rows [{}, {}) of '{}', which splits its 128 x 128 scale "
                  "blocks; export it dequantized (without --codes)",
                  t.hf_name, t.row0, t.row0 + t.rows, model->table().specs[t.param].name);
    if (wrote_codes && (metadata[kCodesFormatKey] != qformat_name(q.format) ||
                        metadata[kCodesGranularityKey] != granularity_name(q.granularity)))
      usage_error("--codes: the checkpoint's weights have more than one format or granularity");
    metadata[kCodesFormatKey] = qformat_name(q.format);
    metadata[kCodesGranularityKey] = granularity_name(q.granularity);
    wrote_codes = true;
    // Both pieces come from one read of the whole QTensor (shared by the two fills).
    struct Piece {
      std::vector<uint8_t> codes;
      std::vector<float> scales;
    };
    auto piece = std::make_shared<Piece>();
    auto load = [model, t, q, piece] {
      if (!piece->codes.empty() || !piece->scales.empty()) return;
      std::vector<uint8_t> codes(size_t(code_bytes(q.format, q.numel())));
      std::vector<float> scales(size_t(num_scales(q.granularity, q.rows, q.cols)));
      model->store().get_codes(t.param, codes.data(), scales.data());
      piece->codes.resize(size_t(code_bytes(q.format, t.rows * q.cols)));
      piece->scales.resize(size_t(num_scales(q.granularity, t.rows, q.cols)));
      extract_codes_piece(q, codes.data(), scales.data(), t.row0, t.rows, piece->codes.data(),
                          piece->scales.data());
    };
    tensors.push_back({t.hf_name + kCodesSuffix, StDType::U8,
                       codes_piece_shape(q.format, t.rows, q.cols), [load, piece](char* dst) {
                         load();
                         std::memcpy(dst, piece->codes.data(), piece->codes.size());
                       }});
    tensors.push_back({t.hf_name + kScalesSuffix, StDType::F32,
                       scales_piece_shape(q.granularity, t.rows, q.cols), [load, piece](char* dst) {
                         load();
                         std::memcpy(dst, piece->scales.data(), piece->scales.size() * 4);
                       }});
  }
  const std::string dtype = opts.dtype == StDType::F32 ? "float32" : "bfloat16";
  nlohmann::ordered_json config = hf_config_json(m, dtype);
  if (wrote_codes) {
    config["eco_codes"] = {{"format", metadata[kCodesFormatKey]},
                           {"granularity", metadata[kCodesGranularityKey]},
                           {"treatment", model->config().precision.treatment.name}};
  }
  std::vector<std::string> written = write_hf_weights(opts.out_dir, tensors, opts.shard_bytes,
                                                      metadata);
  const std::string config_path = (fs::path(opts.out_dir) / "config.json").string();
  write_text_file(config_path, config.dump(2) + "\n");
  written.push_back(config_path);
  return written;
}

}  // namespace eco
