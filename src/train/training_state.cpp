// Checkpoint contents: the run's tensors and step to and from a CheckpointState.
#include "train/training_state.h"

#include "core/error.h"

namespace eco {

NamedTensors persistent_tensors(Transformer& model, const Optimizer& opt) {
  NamedTensors all = model.store().state();
  for (auto& e : opt.state()) all.push_back(std::move(e));
  return all;
}

CheckpointState capture_state(const Config& cfg, int64_t step, Backend& backend,
                              const NamedTensors& tensors) {
  CheckpointState st;
  st.step = step;
  st.tokens = step * cfg.tokens_per_step();
  st.fingerprint = model_fingerprint(cfg);
  st.config_yaml = to_yaml(cfg);
  for (const auto& [name, t] : tensors) {
    std::vector<char> blob(t.bytes());
    backend.copy_to_host(blob.data(), t);
    st.sections.emplace_back(name, std::move(blob));
  }
  return st;
}

int64_t restore_state(const std::string& path, const Config& cfg, Backend& backend,
                      const NamedTensors& tensors) {
  const CheckpointState st = load_checkpoint(path);
  const std::string want = model_fingerprint(cfg);
  if (st.fingerprint != want)
    usage_error("{}: checkpoint was written by an incompatible config (checkpoint: {}; this config: {})",
                path, st.fingerprint, want);
  if (st.sections.size() != tensors.size())
    runtime_error("{}: checkpoint has {} tensors, this run has {}", path, st.sections.size(),
                  tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto& blob = st.section(name, path);
    if (blob.size() != t.bytes())
      runtime_error("{}: section '{}' has {} bytes, expected {}", path, name, blob.size(),
                    t.bytes());
    backend.copy_from_host(t, blob.data());
  }
  if (st.step > cfg.total_steps())
    usage_error("{}: checkpoint is at step {}, beyond this run's {} steps", path, st.step,
                cfg.total_steps());
  return st.step;
}

}  // namespace eco
