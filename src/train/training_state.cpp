// Checkpoint contents: the run's tensors and step to and from a CheckpointState.
#include "train/training_state.h"

#include <cmath>
#include <cstring>

#include "base/error.h"

namespace eco {

NamedTensors persistent_tensors(Transformer& model, const Optimizer& opt) {
  NamedTensors all = model.store().state();
  for (auto& e : opt.state()) all.push_back(std::move(e));
  return all;
}

TensorBounds persistent_bounds(Transformer& model, const Optimizer& opt) {
  TensorBounds all(model.store().state().size());
  for (auto& b : opt.state_bounds()) all.push_back(std::move(b));
  const ExpertParallel& P = model.expert_parallel();
  if (!P.enabled()) return all;
  // Expert parallelism: a routed expert's tensors come whole from its owner in the first
  // expert-parallel group (world rank e = the owner's group rank); every other range is empty
  // (the owners in the other groups hold the same bits). Under ZeRO-1 its moments come by rows
  // from the owners in every group (Optimizer::state_bounds).
  const ParamTable& table = model.table();
  const int world = P.ep * P.dp, E = model.config().moe.n_experts;
  const auto owner_bounds = [&](size_t param, int64_t whole) {
    std::vector<int64_t> b(size_t(world) + 1, 0);
    const int o = P.owner(routed_expert_of(table.specs[param].name), E);
    for (int r = o + 1; r <= world; ++r) b[size_t(r)] = whole;
    return b;
  };
  const auto layout = model.store().state_layout();
  for (size_t j = 0; j < layout.size(); ++j)
    if (routed_expert_of(table.specs[layout[j].param].name) >= 0)
      all[j] = owner_bounds(layout[j].param, layout[j].whole_bytes);
  const NamedTensors moments = opt.state();  // per parameter: m (and v)
  const size_t per = moments.size() / table.specs.size();
  for (size_t j = 0; j < moments.size(); ++j) {
    const size_t i = j / per;
    if (routed_expert_of(table.specs[i].name) < 0 || !all[layout.size() + j].empty()) continue;
    all[layout.size() + j] =
        owner_bounds(i, table.specs[i].numel() * int64_t(dtype_size(moments[j].second.dtype)));
  }
  return all;
}

CheckpointState capture_state(const Config& cfg, int64_t step, Backend& backend,
                              const NamedTensors& tensors, const TensorBounds& bounds,
                              ParallelPlan* plan) {
  CheckpointState st;
  st.step = step;
  st.tokens = step * cfg.tokens_per_step();
  st.fingerprint = model_fingerprint(cfg);
  st.config_yaml = to_yaml(cfg);
  const bool writer = !plan || plan->rank() == 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const std::vector<int64_t>* b = i < bounds.size() && !bounds[i].empty() ? &bounds[i] : nullptr;
    if (!b) {  // a whole tensor: only the writing rank copies it off the device
      std::vector<char> blob(writer ? t.bytes() : 0);
      if (writer) backend.copy_to_host(blob.data(), t);
      st.sections.emplace_back(name, std::move(blob));
      continue;
    }
    ECO_ASSERT(plan, "a sharded checkpoint section '{}' without a parallel plan", name);
    const int r = plan->rank();
    const int64_t begin = (*b)[size_t(r)], end = (*b)[size_t(r) + 1];
    // An empty range with bytes: a copy of what another rank sends (expert parallelism's
    // owners outside the first group).
    ECO_ASSERT(end - begin == int64_t(t.bytes()) || end == begin,
               "section '{}': rank {} holds {} bytes, its range {}", name, r, t.bytes(),
               end - begin);
    // Rank 0 (the writer) holds the whole section; every other rank its own range only.
    std::vector<char> blob(size_t(r == 0 ? b->back() : end - begin));
    char* mine = r == 0 ? blob.data() + begin : blob.data();
    if (end > begin) backend.copy_to_host(mine, t);
    plan->gather_to_lead(mine, r == 0 ? blob.data() : nullptr, *b);
    if (r != 0) blob = {};  // only rank 0 writes
    st.sections.emplace_back(name, std::move(blob));
  }
  return st;
}

std::string first_non_finite(const CheckpointState& st, const NamedTensors& tensors) {
  for (size_t i = 0; i < tensors.size() && i < st.sections.size(); ++i) {
    const DType dt = tensors[i].second.dtype;
    const std::vector<char>& blob = st.sections[i].second;
    const size_t n = blob.size() / dtype_size(dt);
    for (size_t k = 0; k < n; ++k) {
      double v = 0;
      if (dt == DType::F32) {
        float f;
        std::memcpy(&f, blob.data() + 4 * k, 4);
        v = f;
      } else if (dt == DType::F64) {
        std::memcpy(&v, blob.data() + 8 * k, 8);
      } else if (dt == DType::BF16) {
        uint16_t b;
        std::memcpy(&b, blob.data() + 2 * k, 2);
        v = bf16_to_float(b);
      } else {
        break;  // integer codes and token ids: nothing to check
      }
      if (!std::isfinite(v))
        return fmt::format("'{}' holds {} at element {}", st.sections[i].first, v, k);
    }
  }
  return "";
}

int64_t restore_state(const CheckpointState& st, const std::string& path, const Config& cfg,
                      Backend& backend, const NamedTensors& tensors, const TensorBounds& bounds,
                      int rank) {
  const std::string want = model_fingerprint(cfg);
  if (st.fingerprint != want)
    usage_error("{}: checkpoint was written by an incompatible config (checkpoint: {}; this config: {})",
                path, st.fingerprint, want);
  const std::vector<std::string> differ = trajectory_differences(st.config_yaml, cfg);
  if (!differ.empty()) {
    std::string list;
    for (const std::string& d : differ) list += (list.empty() ? "" : "; ") + d;
    usage_error("{}: checkpoint was written by a run with other settings ({}): resume with the "
                "same settings, or start over with --overwrite",
                path, list);
  }
  if (st.sections.size() != tensors.size())
    runtime_error("{}: checkpoint has {} tensors, this run has {}", path, st.sections.size(),
                  tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const auto& blob = st.section(name, path);
    const std::vector<int64_t>* b = i < bounds.size() && !bounds[i].empty() ? &bounds[i] : nullptr;
    const size_t whole = b ? size_t(b->back()) : t.bytes();
    if (blob.size() != whole)
      runtime_error("{}: section '{}' has {} bytes, expected {}", path, name, blob.size(), whole);
    // A rank holding the whole tensor takes it whole (whatever its range), else its range.
    const size_t begin = b && t.bytes() != whole ? size_t((*b)[size_t(rank)]) : 0;
    ECO_ASSERT(begin + t.bytes() <= whole, "section '{}': rank {} takes {} bytes at {} of {}", name,
               rank, t.bytes(), begin, whole);
    if (t.bytes() > 0) backend.copy_from_host(t, blob.data() + begin);
  }
  if (st.step > cfg.total_steps())
    usage_error("{}: checkpoint is at step {}, beyond this run's {} steps", path, st.step,
                cfg.total_steps());
  return st.step;
}

}  // namespace eco
