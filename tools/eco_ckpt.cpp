// eco-ckpt: look into checkpoints.
//   eco-ckpt info CKPT        step, tokens, fingerprint, the loss-spike window and each
//                             section's size and FNV-1a hash
//   eco-ckpt diff CKPT CKPT   compares the training state (step, tokens, fingerprint and every
//                             section: parameters, codes, scales, moments, ...) byte for byte;
//                             exit 0 when equal, 1 when not (each difference printed), 2 on a
//                             usage or read error. The resolved configs are not compared (two
//                             equal trainings may differ in, e.g., parallel.dp and grad_accum),
//                             nor the loss-spike windows (losses summed over the micro-batches
//                             and ranks of another split may differ in their last bits).
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "base/error.h"
#include "train/checkpoint.h"

namespace {

uint64_t fnv1a(const std::vector<char>& b) {
  uint64_t h = 1469598103934665603ull;
  for (char c : b) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

int info(const std::string& path) {
  const eco::CheckpointState s = eco::load_checkpoint(path);
  std::printf("%s: step %lld, %lld tokens\nfingerprint: %s\n", path.c_str(), (long long)s.step,
              (long long)s.tokens, s.fingerprint.c_str());
  std::printf("loss-spike window: %zu losses, lowest running median %.6g\n",
              s.loss_spikes.recent.size(), s.loss_spikes.lowest_median);
  for (const auto& [name, bytes] : s.sections)
    std::printf("  %-24s %14zu bytes  fnv1a %016llx\n", name.c_str(), bytes.size(),
                (unsigned long long)fnv1a(bytes));
  return 0;
}

int diff(const std::string& a_path, const std::string& b_path) {
  const eco::CheckpointState a = eco::load_checkpoint(a_path), b = eco::load_checkpoint(b_path);
  int differences = 0, equal = 0;
  auto report = [&](const std::string& what) {
    std::printf("differs: %s\n", what.c_str());
    ++differences;
  };
  if (a.step != b.step) report(fmt::format("step {} vs {}", a.step, b.step));
  if (a.tokens != b.tokens) report(fmt::format("tokens {} vs {}", a.tokens, b.tokens));
  if (a.fingerprint != b.fingerprint)
    report(fmt::format("fingerprint '{}' vs '{}'", a.fingerprint, b.fingerprint));
  std::map<std::string, const std::vector<char>*> in_b;
  for (const auto& [name, bytes] : b.sections) in_b[name] = &bytes;
  for (const auto& [name, bytes] : a.sections) {
    const auto it = in_b.find(name);
    if (it == in_b.end()) {
      report(fmt::format("section '{}' only in {}", name, a_path));
      continue;
    }
    const std::vector<char>& other = *it->second;
    in_b.erase(it);
    if (bytes.size() != other.size()) {
      report(fmt::format("section '{}': {} vs {} bytes", name, bytes.size(), other.size()));
      continue;
    }
    size_t n = 0, first = 0;
    for (size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i] != other[i] && n++ == 0) first = i;
    if (n) {
      report(fmt::format("section '{}': {} of {} bytes, the first at byte {}", name, n,
                         bytes.size(), first));
    } else {
      ++equal;
    }
  }
  for (const auto& [name, bytes] : in_b) report(fmt::format("section '{}' only in {}", name, b_path));
  std::printf("%d of %zu sections equal; %s\n", equal, a.sections.size(),
              differences ? "the training states differ" : "the training states are equal");
  return differences ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "info" && argc == 3) return info(argv[2]);
    if (cmd == "diff" && argc == 4) return diff(argv[2], argv[3]);
    std::fprintf(stderr, "usage: eco-ckpt info CKPT | eco-ckpt diff CKPT CKPT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eco-ckpt: error: %s\n", e.what());
    return 2;
  }
}
