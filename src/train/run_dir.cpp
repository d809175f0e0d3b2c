// Writes into the run directory, on the lead rank only.
#include "train/run_dir.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "train/metrics.h"

namespace eco {
namespace fs = std::filesystem;

std::string RunDir::file(const char* name) const { return (fs::path(path_) / name).string(); }

void RunDir::prepare() const {
  if (!writes()) return;
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec || !fs::is_directory(path_))
    usage_error("train.out_dir '{}': cannot create directory ({})", path_, ec.message());
  const std::string probe = file(".write_test");
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) usage_error("train.out_dir '{}': directory is not writable", path_);
  std::fclose(f);
  fs::remove(probe, ec);
}

void RunDir::write_resolved_config(const std::string& yaml) const {
  if (writes()) write_text_file(file("config.resolved.yaml"), yaml);
}

std::string RunDir::save_checkpoint(const CheckpointState& state, int keep) const {
  const std::string path = file(checkpoint_name(state.step).c_str());
  if (!writes()) return path;
  eco::save_checkpoint(path, state);
  prune_checkpoints(path_, keep);
  return path;
}

std::string RunDir::latest_checkpoint() const { return eco::latest_checkpoint(path_); }

void RunDir::append_sample(int64_t step, const std::string& text) const {
  if (!writes()) return;
  std::FILE* f = std::fopen(file("samples.txt").c_str(), "a");
  if (!f) return;
  std::fprintf(f, "=== step %lld ===\n%s\n", (long long)step, text.c_str());
  std::fclose(f);
}

void RunDir::write_summary(const nlohmann::json& summary) const {
  if (writes()) write_json_file(file("summary.json"), summary);
}

}  // namespace eco
