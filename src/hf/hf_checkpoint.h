// A Hugging Face checkpoint directory: config.json and the weights, as model.safetensors or, above
// a size limit, as shards model-0000i-of-0000n.safetensors listed by model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard file}}).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hf/safetensors.h"

namespace eco {

constexpr const char* kHfWeightsFile = "model.safetensors";
constexpr const char* kHfIndexFile = "model.safetensors.index.json";
constexpr uint64_t kHfDefaultShardBytes = 5'000'000'000;  // save_pretrained's default, 5 GB

class HfCheckpoint {
 public:
  // Opens dir's index (when there is one) or model.safetensors, and validates every file; with an
  // index, every shard it names must be in dir, every tensor it lists in the shard it names and
  // every shard's tensor listed. A path that is a FIFO, a directory or a broken symbolic link is
  // refused as what it is (core/input_file.h), never opened.
  explicit HfCheckpoint(std::string dir);

  struct Located {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  const std::string& dir() const { return dir_; }
  // Every tensor by name.
  const std::map<std::string, Located>& tensors() const { return tensors_; }
  const Located* find(const std::string& name) const;
  // The metadata of the first weights file (save_pretrained writes the same into every shard).
  const std::map<std::string, std::string>& metadata() const { return files_.front()->metadata(); }
  // dir/config.json parsed (a usage error naming it when absent or not a JSON object).
  nlohmann::json config() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;
};

// Writes `tensors` into dir as model.safetensors, or, when together they exceed max_shard_bytes,
// as shards of at most that size (a tensor larger than the limit gets a shard of its own) plus
// the index. Weights files of an earlier export in dir (model.safetensors, the index, shards)
// are removed first so that none is left beside the new ones. Returns the files written.
std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<SafetensorsOutput>& tensors,
                                          uint64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata);

}  // namespace eco
