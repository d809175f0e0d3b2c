// Arena layout (aligned offsets) and its single allocation.
#include "model/arena.h"

#include "base/error.h"
#include "base/backend.h"

namespace eco {

size_t ArenaBuilder::add(std::string name, std::vector<int64_t> shape, MemCategory category,
                         bool quantizable_param) {
  const int64_t align = kArenaAlignBytes / int64_t(dtype_size(dtype_));
  const int64_t offset = (end_ + align - 1) / align * align;
  padding_ += offset - end_;
  ArenaSlot s{std::move(name), offset, std::move(shape), category, quantizable_param};
  ECO_ASSERT(s.numel() > 0, "arena '{}': tensor '{}' is empty", name_, s.name);
  end_ = offset + s.numel();
  slots_.push_back(std::move(s));
  return slots_.size() - 1;
}

Arena ArenaBuilder::allocate(Backend& be) const {
  Arena a{name_, Tensor{}, slots_, padding_};
  if (slots_.empty()) return a;
  a.buffer = be.alloc(name_, {end_}, dtype_, MemCategory::Workspace);
  std::vector<MemoryLedger::Entry> parts;
  const uint64_t esize = dtype_size(dtype_);
  for (const auto& s : slots_)
    parts.push_back({s.name, s.category, uint64_t(s.numel()) * esize, s.quantizable_param});
  if (padding_ > 0)
    parts.push_back({name_ + " alignment padding", MemCategory::Padding,
                     uint64_t(padding_) * esize, false});
  be.ledger().split_last(std::move(parts));
  return a;
}

}  // namespace eco
