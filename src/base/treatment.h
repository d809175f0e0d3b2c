// The precision treatment: one config value (`precision.treatment`), parsed once by the config
// loader, that selects how the block linear weights are stored, whether a master copy exists,
// how they are updated, and what the forward casts. The model never branches on it; the storage
// policy (quant/storage_policy.h), ParamStore and the optimizer read it.
#pragma once
#include <string>
#include <vector>

#include "base/math/eco_update.h"
#include "base/math/qformat.h"
#include "base/math/scale_groups.h"

namespace eco {

// What the forward does to the activations entering a quantized linear layer.
enum class ActCast : uint8_t {
  None,     // fp32 (the reference) or INT4 weight-only treatments
  Bf16,     // round to bf16 (bf16-mw: what a bf16 GEMM would see)
  E4M3Row,  // FP8 E4M3, one scale per token row, RTN (the FP8 treatments)
};

struct Treatment {
  std::string name = "fp32";
  bool quantized = false;    // block linears stored as QTensor codes + scales
  bool master = false;       // a fp32 master copy of the block linears is kept
  bool bf16_weights = false; // the forward uses bf16-rounded weights (bf16-mw)
  UpdatePolicy policy = UpdatePolicy::Master;
  QFormat format = QFormat::E4M3;
  Granularity granularity = Granularity::PerRow;
  Rounding rounding = Rounding::RTN;
  ActCast act = ActCast::None;
};

// Parse a treatment name (fp32, bf16-mw, fp8-{mw,naive,eco}-{rtn,sr}, int4-{mw,naive,eco}-{rtn,sr});
// an unknown name is a usage error listing the valid ones.
Treatment treatment_from_name(const std::string& name);
const std::vector<std::string>& treatment_names();

}  // namespace eco
