// DataLoader (see loader.h).
#include "data/loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <numeric>

#include "base/error.h"
#include "data/splitmix64.h"

namespace eco {

namespace {

constexpr int64_t kUnlimited = INT64_MAX / 2;

void check_options(const LoaderOptions& o) {
  if (o.batch_size <= 0) usage_error("data loader: batch_size {} must be > 0", o.batch_size);
  if (o.seq_len <= 0) usage_error("data loader: seq_len {} must be > 0", o.seq_len);
  if (o.vocab_size <= 0) usage_error("data loader: model.vocab_size {} must be > 0", o.vocab_size);
  if (o.world_size <= 0) usage_error("data loader: world_size {} must be > 0", o.world_size);
  if (o.rank < 0 || o.rank >= o.world_size)
    usage_error("data loader: rank {} is outside world_size {}", o.rank, o.world_size);
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t num_windows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(num_windows);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng rng(data::hash_counters({seed, static_cast<uint64_t>(epoch)}));
  data::fisher_yates(perm.data(), num_windows, rng);
  return perm;
}

struct DataLoader::State {
  LoaderOptions opt;
  std::string pattern;

  // Shards: each one open for pread, and the prefix sum of their window counts (size shards + 1).
  std::vector<ShardInfo> infos;
  std::vector<ShardReader> readers;
  std::vector<int64_t> window_start;
  int64_t total_tokens = 0;

  std::optional<SyntheticCorpus> corpus;

  // The most recently used epoch permutations (a batch straddles at most two epochs).
  mutable std::mutex cache_mutex;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache;

  int64_t windows() const { return corpus ? kUnlimited : window_start.back(); }

  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (const auto& [e, p] : cache)
      if (e == epoch) return p;
    auto p =
        std::make_shared<const std::vector<int64_t>>(epoch_permutation(windows(), opt.seed, epoch));
    if (cache.size() >= 2) cache.erase(cache.begin());
    cache.emplace_back(epoch, p);
    return p;
  }

  // out (T + 1): the window in slot `slot`, read from its shard (tokens checked < vocab_size).
  void window(int64_t slot, int32_t* out) const {
    const int T = opt.seq_len;
    if (corpus) {
      corpus->window(slot, T + 1, out);
      return;
    }
    const int64_t W = windows();
    int64_t k = slot % W;
    if (opt.shuffle) k = (*permutation(slot / W))[k];
    const size_t shard =
        std::upper_bound(window_start.begin(), window_start.end(), k) - window_start.begin() - 1;
    readers[shard].read((k - window_start[shard]) * T, T + 1, opt.vocab_size, out);
  }
};

DataLoader::DataLoader(std::unique_ptr<State> state) : s_(std::move(state)) {}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;
DataLoader::~DataLoader() = default;

DataLoader DataLoader::from_shards(const std::string& pattern, const LoaderOptions& options) {
  check_options(options);
  auto s = std::make_unique<State>();
  s->opt = options;
  s->pattern = pattern;
  s->window_start.push_back(0);
  const int T = options.seq_len;
  for (const std::string& path : expand_shard_pattern(pattern)) {
    ShardReader reader(path);
    const int64_t n = reader.info().num_tokens;
    if (n < T + 1)
      data_error("{}: shard has {} tokens, fewer than one window of seq_len + 1 = {}", path, n,
                 T + 1);
    s->window_start.push_back(s->window_start.back() + (n - 1) / T);
    s->total_tokens += n;
    s->infos.push_back(reader.info());
    s->readers.push_back(std::move(reader));
  }
  return DataLoader(std::move(s));
}

DataLoader DataLoader::synthetic(int split, const LoaderOptions& options) {
  check_options(options);
  auto s = std::make_unique<State>();
  s->opt = options;
  s->corpus.emplace(options.vocab_size, split);
  return DataLoader(std::move(s));
}

void DataLoader::batch(int64_t index, int32_t* inputs, int32_t* targets) const {
  if (index < 0) usage_error("data loader: batch index {} must be >= 0", index);
  const LoaderOptions& o = s_->opt;
  const int T = o.seq_len;
  std::vector<int32_t> window(T + 1);
  for (int b = 0; b < o.batch_size; ++b) {
    const int64_t slot = (index * o.world_size + o.rank) * o.batch_size + b;
    s_->window(slot, window.data());
    std::copy(window.begin(), window.begin() + T, inputs + static_cast<int64_t>(b) * T);
    std::copy(window.begin() + 1, window.end(), targets + static_cast<int64_t>(b) * T);
  }
}

int64_t DataLoader::windows_per_epoch() const { return s_->windows(); }
int64_t DataLoader::num_tokens() const { return s_->corpus ? kUnlimited : s_->total_tokens; }

std::optional<double> DataLoader::entropy_floor_nats() const {
  if (s_->corpus) return s_->corpus->entropy_rate_nats();
  return std::nullopt;
}

const SyntheticCorpus* DataLoader::synthetic_corpus() const {
  return s_->corpus ? &*s_->corpus : nullptr;
}
const std::vector<ShardInfo>& DataLoader::shards() const { return s_->infos; }
const LoaderOptions& DataLoader::options() const { return s_->opt; }

std::string DataLoader::describe() const {
  const LoaderOptions& o = s_->opt;
  const std::string layout =
      fmt::format("B={} T={} rank {}/{}", o.batch_size, o.seq_len, o.rank, o.world_size);
  if (s_->corpus) {
    const auto& p = SyntheticCorpus::kProbs;
    return fmt::format(
        "synthetic Markov corpus ({} split): vocab {}, {} successors/token p={{{}}}, entropy floor "
        "{:.4f} nats; {}",
        s_->corpus->split() == 0 ? "train" : "val", o.vocab_size, SyntheticCorpus::kSuccessors,
        fmt::join(p.begin(), p.end(), ","), s_->corpus->entropy_rate_nats(), layout);
  }
  const int64_t per_batch = static_cast<int64_t>(o.batch_size) * o.world_size;
  return fmt::format(
      "shards {}: {} file{}, {} tokens, {} windows of {}+1 ({:.1f} global batches "
      "per epoch), shuffle {}; {}",
      s_->pattern, s_->infos.size(), s_->infos.size() == 1 ? "" : "s", s_->total_tokens,
      windows_per_epoch(), o.seq_len, static_cast<double>(windows_per_epoch()) / per_batch,
      o.shuffle ? "on" : "off", layout);
}

}  // namespace eco
