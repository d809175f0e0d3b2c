// eco-train export: an ecotrain checkpoint written as a Hugging Face checkpoint directory
// (config.json + model.safetensors, or shards + model.safetensors.index.json), named and laid
// out as hf_layout.h says. Quantized weights are dequantized (bf16 by default, or f32) or, with
// codes, written as codes + scales (hf_codes.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hf/hf_checkpoint.h"
#include "hf/safetensors.h"

namespace eco {

struct HfExportOptions {
  std::string out_dir;
  StDType dtype = StDType::BF16;  // of the dense tensors: BF16 or F32
  uint64_t shard_bytes = kHfDefaultShardBytes;
  bool codes = false;  // quantized weights as codes + scales (their masters are not written)
};

// Reads the checkpoint (any treatment; its resolved config says the model) and writes the
// directory. Returns the files written. A model without a HF equivalent, or codes that cannot be
// split where HF splits the weight, is a usage error before anything is written.
std::vector<std::string> export_hf(const std::string& checkpoint, const HfExportOptions& opts);

}  // namespace eco
