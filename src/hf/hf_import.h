// model.init_from: a Hugging Face checkpoint directory loaded into a run's parameters. config.json
// must describe the run's model, and the tensors must be exactly the model's (hf_layout.h), each
// of the right shape and a float dtype (F32, BF16, F16), or, for an export made with --codes,
// codes + scales (hf_codes.h); every value must be finite. The values are then stored as a fresh
// initialisation would store them: ParamStore::set (RTN quantization under a quantized
// treatment), or, for codes in the run's own format and granularity, the codes themselves
// (ParamStore::set_codes).
#pragma once
#include <string>

#include "core/config.h"
#include "model/param_store.h"

namespace eco {

// Every check import_hf makes, storing nothing: the safetensors headers (hf/safetensors.h), the
// index and its shards, config.json against `m`, the tensor list, and then every tensor read and
// checked finite (all experts, whichever rank runs it). A fresh start runs it before the run
// directory is created, so that a bad checkpoint leaves nothing behind. import_hf then reads the
// files a second time (and checks them again as it stores): a start from model.init_from reads
// the checkpoint twice, rather than holding all of it in memory.
void check_hf_import(const std::string& dir, const ModelConfig& m);

// Loads every parameter `store` holds (present(i): under expert parallelism a rank reads only
// its own experts). Every disagreement is a usage error naming the directory (or file), the
// tensor or key, what it holds and what the run expects; a malformed file, and a NaN or an
// infinity in a tensor (named with the file and its first such element), is a data error. A
// parameter is stored only once all of its tensors have been read and checked.
void import_hf(const std::string& dir, const ModelConfig& m, ParamStore& store);

}  // namespace eco
