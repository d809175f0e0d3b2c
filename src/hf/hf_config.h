// config.json of a Hugging Face checkpoint: written from ecotrain's model config on export,
// and compared with the run's model config on import (one message per disagreeing key, naming
// the config.json key and value and the run's key and value).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/config.h"
#include "hf/hf_layout.h"

namespace eco {

// The config.json transformers reads for this model (hf_arch_of(m)'s class), with the keys
// transformers 4.x and 5.x read (e.g. rope_theta and rope_parameters both). `dtype`: the
// weights' torch dtype ("float32", "bfloat16").
nlohmann::ordered_json hf_config_json(const ModelConfig& m, const std::string& dtype);

// Each way config.json `file` disagrees with model `m`: the model type, the sizes, the norm
// epsilon, the RoPE bases, the attention and MoE shape and the structure flags (activation,
// biases, soft-capping, RoPE scaling). Absent keys take transformers' defaults for that class.
// Empty when they agree.
std::vector<std::string> hf_config_mismatches(const nlohmann::json& file, const ModelConfig& m);

}  // namespace eco
