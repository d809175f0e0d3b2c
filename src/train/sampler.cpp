// Temperature sampling from the model and the decoding of samples to text.
#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "train/signals.h"

namespace eco {
namespace fs = std::filesystem;

TextSampler::TextSampler(const Config& cfg)
    : seq_len_(cfg.model.seq_len),
      vocab_size_(cfg.model.vocab_size),
      temperature_(cfg.train.sample_temperature),
      synthetic_(cfg.data.source == DataSource::Synthetic) {
  if (synthetic_) return;
  std::string table = cfg.data.decode_table;
  if (table.empty()) {
    const auto first = expand_shard_pattern(cfg.data.train).front();
    const auto candidate = fs::path(first).parent_path() / "decode_table.bin";
    if (fs::exists(candidate)) table = candidate.string();
  }
  if (table.empty()) return;
  table_.emplace(DecodeTable::load(table));
  if (table_->vocab_size() > vocab_size_)
    usage_error("{}: decode table {} has {} tokens but model.vocab_size is {}", cfg.source_path,
                table, table_->vocab_size(), vocab_size_);
}

std::string TextSampler::decode(const int32_t* tokens, size_t n) const {
  if (synthetic_) return SyntheticCorpus::render(tokens, n);
  if (table_) return table_->decode(tokens, n);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? " " : "", tokens[i]);
  return s;
}

std::string TextSampler::sample(Transformer& model, Backend& backend, int32_t prompt,
                                int n_tokens, uint64_t seed, bool stop_early) const {
  const int T = seq_len_, V = vocab_size_;
  Rng rng(seed);
  std::vector<int32_t> seq = {prompt};
  const float inv_temp = float(1.0 / temperature_);
  for (int i = 0; i < n_tokens && !(stop_early && stop_requested()); ++i) {  // a stop signal ends it early
    const int ctx = std::min<int>(int(seq.size()), T);
    const int32_t* window = seq.data() + seq.size() - ctx;
    const Tensor& lg = model.forward_logits(window, 1, ctx);
    // Token ctx-1's row: the distribution of the next token.
    std::vector<float> p =
        to_host_floats(backend, lg.slice(int64_t(ctx - 1) * model.logits_stride(), {V}));
    const float mx = *std::max_element(p.begin(), p.end());
    double total = 0;
    for (auto& l : p) total += (l = std::exp((l - mx) * inv_temp));
    double r = rng.uniform() * total;
    int32_t next = V - 1;  // r can outlast the sum by rounding: the last token then
    for (int v = 0; v < V; ++v)
      if ((r -= p[v]) <= 0) {
        next = v;
        break;
      }
    seq.push_back(next);
  }
  return decode(seq.data(), seq.size());
}

}  // namespace eco
