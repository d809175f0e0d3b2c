// Hugging Face checkpoint directories: single-file and sharded weights, the index, config.json.
#include "hf/hf_checkpoint.h"

#include <filesystem>
#include <string_view>

#include "base/error.h"
#include "core/input_file.h"
#include "train/metrics.h"

namespace eco {
namespace fs = std::filesystem;

namespace {
// Whether `name` is a shard file name that write_hf_weights writes:
// model-NNNNN-of-NNNNN.safetensors, with exactly five decimal digits in each count.
bool is_shard_file_name(std::string_view name) {
  constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";  // '#': a digit
  if (name.size() != kPattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool digit = name[i] >= '0' && name[i] <= '9';
    if (kPattern[i] == '#' ? !digit : name[i] != kPattern[i]) return false;
  }
  return true;
}
}  // namespace

HfCheckpoint::HfCheckpoint(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    usage_error("{}: not a directory (a Hugging Face checkpoint directory with config.json and "
                "{} or {} was expected)",
                dir_, kHfWeightsFile, kHfIndexFile);
  const fs::path index = fs::path(dir_) / kHfIndexFile, single = fs::path(dir_) / kHfWeightsFile;
  // Present is anything at the path, a FIFO or a broken symbolic link too: the readers refuse
  // those, naming what they are (core/input_file.h), rather than a missing file being reported.
  if (non_regular_kind(index.string()) != "missing") {
    const std::string shown = index.string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_small_file(shown, "safetensors index", 1 << 28));
    } catch (const nlohmann::json::exception& e) {
      data_error("{}: not valid JSON ({})", shown, e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      data_error("{}: expected an object with a \"weight_map\" object", shown);
    std::map<std::string, size_t> file_index;
    std::map<std::string, std::string> listed;  // tensor -> shard
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string())
        data_error("{}: weight_map['{}'] is not a file name", shown, clip_for_message(tensor));
      const std::string f = file.get<std::string>();
      // A shard is a file beside the index: no directories, no way out of dir.
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        data_error("{}: weight_map['{}'] names '{}', not a file in the same directory", shown,
                   clip_for_message(tensor), clip_for_message(f));
      listed[tensor] = f;
      if (!file_index.count(f)) {
        if (non_regular_kind((fs::path(dir_) / f).string()) == "missing")
          data_error("{}: weight_map['{}'] names {}, which is not in {}", shown,
                     clip_for_message(tensor), clip_for_message(f), dir_);
        file_index[f] = files_.size();
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir_) / f).string()));
      }
    }
    if (files_.empty()) data_error("{}: the weight_map lists no tensor", shown);
    for (const auto& [tensor, f] : listed) {
      const SafetensorsFile& file = *files_[file_index[f]];
      const SafetensorsEntry* e = file.find(tensor);
      if (!e)
        data_error("{}: lists tensor '{}' in {}, which does not hold it", shown,
                   clip_for_message(tensor), f);
      tensors_[tensor] = {&file, e};
    }
    for (const auto& file : files_)
      for (const SafetensorsEntry& e : file->entries())
        if (listed[e.name] != fs::path(file->path()).filename().string())
          data_error("{}: holds tensor '{}', which {} {}", file->path(),
                     clip_for_message(e.name), shown,
                     listed[e.name].empty() ? "does not list" : "places in " + listed[e.name]);
    return;
  }
  if (non_regular_kind(single.string()) == "missing")
    usage_error("{}: holds neither {} nor {} (a Hugging Face safetensors checkpoint was "
                "expected)",
                dir_, kHfWeightsFile, kHfIndexFile);
  files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
  for (const SafetensorsEntry& e : files_.front()->entries())
    tensors_[e.name] = {files_.front().get(), &e};
}

const HfCheckpoint::Located* HfCheckpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

nlohmann::json HfCheckpoint::config() const {
  const std::string path = (fs::path(dir_) / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_file(path, "config.json", 1 << 24));
  } catch (const nlohmann::json::exception& e) {
    usage_error("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object()) usage_error("{}: expected a JSON object", path);
  return j;
}

std::vector<std::string> write_hf_weights(const std::string& dir,
                                          const std::vector<SafetensorsOutput>& tensors,
                                          uint64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) usage_error("{}: cannot create the output directory", dir);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kHfWeightsFile || name == kHfIndexFile || is_shard_file_name(name))
      fs::remove(e.path(), ec);
  }
  // Shards in tensor order, each filled up to the limit.
  std::vector<std::vector<SafetensorsOutput>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const SafetensorsOutput& t : tensors) {
    if (!shards.back().empty() && in_shard + t.bytes() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t.bytes();
    total += t.bytes();
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    written.push_back((fs::path(dir) / kHfWeightsFile).string());
    write_safetensors(written.back(), shards.front(), metadata);
    return written;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    written.push_back((fs::path(dir) / name).string());
    write_safetensors(written.back(), shards[s], metadata);
    for (const SafetensorsOutput& t : shards[s]) weight_map[t.name] = name;
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                        {"weight_map", weight_map}};
  const std::string path = (fs::path(dir) / kHfIndexFile).string();
  write_text_file(path, index.dump(2) + "\n");
  written.push_back(path);
  return written;
}

}  // namespace eco
