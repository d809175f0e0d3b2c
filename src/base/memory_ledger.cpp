// The memory ledger's bookkeeping and its printed table.
#include "base/memory_ledger.h"

#include <fmt/format.h>

#include <stdexcept>


namespace eco {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Weights: return "weights";
    case MemCategory::QuantCodes: return "quant_codes";
    case MemCategory::Scales: return "scales";
    case MemCategory::Master: return "master";
    case MemCategory::OptState: return "optimizer_state";
    case MemCategory::Grads: return "grads";
    case MemCategory::Activations: return "activations";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::Padding: return "arena_padding";
    case MemCategory::Count: break;
  }
  return "?";
}

void MemoryLedger::record(std::string name, MemCategory category, uint64_t bytes,
                          bool quantizable_param) {
  totals_[size_t(category)] += bytes;
  entries_.push_back({std::move(name), category, bytes, quantizable_param});
}

void MemoryLedger::split_last(std::vector<Entry> parts) {
  if (entries_.empty()) throw std::logic_error("MemoryLedger::split_last: no entry");
  const Entry whole = entries_.back();
  uint64_t sum = 0;
  for (const auto& p : parts) sum += p.bytes;
  if (sum != whole.bytes)
    throw std::logic_error(fmt::format("MemoryLedger::split_last: parts of '{}' add up to {} bytes, not {}",
                                       whole.name, sum, whole.bytes));
  entries_.pop_back();
  totals_[size_t(whole.category)] -= whole.bytes;
  for (auto& p : parts) record(std::move(p.name), p.category, p.bytes, p.quantizable_param);
}

static bool is_static(MemCategory c) {
  return c == MemCategory::Weights || c == MemCategory::QuantCodes || c == MemCategory::Scales ||
         c == MemCategory::Master || c == MemCategory::OptState;
}

uint64_t MemoryLedger::static_bytes_quantizable() const {
  uint64_t t = 0;
  for (const auto& e : entries_)
    if (e.quantizable_param && is_static(e.category)) t += e.bytes;
  return t;
}

uint64_t MemoryLedger::total() const {
  uint64_t t = 0;
  for (auto v : totals_) t += v;
  return t;
}

uint64_t MemoryLedger::static_bytes() const {
  uint64_t t = 0;
  for (size_t i = 0; i < size_t(MemCategory::Count); ++i)
    if (is_static(MemCategory(i))) t += totals_[i];
  return t;
}

std::string MemoryLedger::table() const {
  std::string s = fmt::format("{:<18} {:>14} {:>10} {:>7}\n", "category", "bytes", "MiB", "share");
  const double all = double(std::max<uint64_t>(total(), 1));
  for (size_t i = 0; i < size_t(MemCategory::Count); ++i) {
    if (totals_[i] == 0) continue;
    s += fmt::format("{:<18} {:>14} {:>10.2f} {:>6.1f}%\n", mem_category_name(MemCategory(i)),
                     totals_[i], totals_[i] / 1048576.0, 100.0 * totals_[i] / all);
  }
  s += fmt::format("{:<18} {:>14} {:>10.2f}\n", "total", total(), total() / 1048576.0);
  s += fmt::format("{:<18} {:>14} {:>10.2f}  (weights + codes + scales + master + optimizer state)\n",
                   "static", static_bytes(), static_bytes() / 1048576.0);
  return s;
}

}  // namespace eco
