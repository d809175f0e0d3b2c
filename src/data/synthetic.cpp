// The synthetic Markov corpus (see synthetic.h).
#include "data/synthetic.h"

#include <cmath>
#include <numeric>

#include "base/error.h"
#include "data/splitmix64.h"

namespace eco {

namespace {

// The K permutations, drawn by Fisher-Yates from the corpus seed. A permutation that would give
// some token a repeated successor (perm_j[s] == perm_i[s], i < j) is redrawn, so that the K
// successors of every token are distinct and the entropy rate is exactly H(p). A Latin rectangle
// always extends, so this terminates; it takes about e^j draws for permutation j when vocab >> K.
std::array<std::vector<int32_t>, SyntheticCorpus::kSuccessors> draw_permutations(int vocab) {
  std::array<std::vector<int32_t>, SyntheticCorpus::kSuccessors> perms;
  Rng rng(data::hash_counters({SyntheticCorpus::kCorpusSeed, static_cast<uint64_t>(vocab)}));
  for (int j = 0; j < SyntheticCorpus::kSuccessors; ++j) {
    std::vector<int32_t>& p = perms[j];
    p.resize(vocab);
    for (int attempt = 0;; ++attempt) {
      ECO_ASSERT(attempt < 1000000, "no collision-free permutation for vocab {}", vocab);
      std::iota(p.begin(), p.end(), 0);
      data::fisher_yates(p.data(), vocab, rng);
      bool distinct = true;
      for (int s = 0; s < vocab && distinct; ++s)
        for (int i = 0; i < j && distinct; ++i) distinct = perms[i][s] != p[s];
      if (distinct) break;
    }
  }
  return perms;
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(int vocab_size, int split)
    : vocab_size_(vocab_size), split_(split) {
  if (vocab_size < kSuccessors)
    usage_error("synthetic corpus: model.vocab_size {} is too small, need >= {}", vocab_size,
                kSuccessors);
  if (split != 0 && split != 1)
    usage_error("synthetic corpus: split {} is not 0 (train) or 1 (val)", split);
  perms_ = draw_permutations(vocab_size);
}

void SyntheticCorpus::window(int64_t window, int len, int32_t* out) const {
  const auto key = [&](int pos) {
    return data::hash_counters({kCorpusSeed, static_cast<uint64_t>(split_),
                                static_cast<uint64_t>(window), static_cast<uint64_t>(pos)});
  };
  if (len <= 0) return;
  int32_t s = static_cast<int32_t>(data::scale_below(key(0), vocab_size_));
  out[0] = s;
  for (int t = 1; t < len; ++t) {
    const double u = static_cast<double>(key(t) >> 11) * 0x1.0p-53;  // [0, 1) as in Rng::uniform
    int j = 0;
    double cdf = kProbs[0];
    while (u >= cdf && j < kSuccessors - 1) cdf += kProbs[++j];
    s = perms_[j][s];
    out[t] = s;
  }
}

double SyntheticCorpus::entropy_rate_nats() const {
  double h = 0.0;
  for (double p : kProbs) h -= p * std::log(p);
  return h;
}

std::string SyntheticCorpus::render(int32_t token) {
  static constexpr char kConsonants[] = "bdfghjklmnprstvwxyzc";  // 20
  static constexpr char kVowels[] = "aeiou";                     // 5
  if (token < 0) return "?";
  std::string out;
  uint32_t v = static_cast<uint32_t>(token);
  do {
    const uint32_t d = v % 100;
    out += kConsonants[d / 5];
    out += kVowels[d % 5];
    v /= 100;
  } while (v > 0);
  return out;
}

std::string SyntheticCorpus::render(const int32_t* tokens, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += render(tokens[i]);
  }
  return out;
}

}  // namespace eco
