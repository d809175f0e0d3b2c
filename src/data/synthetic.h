// The built-in synthetic corpus: a first-order Markov chain with a known entropy floor, needing no
// files. Token s has K successors perm_j[s] (K fixed random permutations of the vocabulary, drawn
// from a constant corpus seed) taken with fixed probabilities p_j. Each perm_j is a permutation, so
// the transition matrix is doubly stochastic: the stationary distribution is uniform, and since the
// K successors of every token are distinct, the entropy rate is exactly H(p) in nats.
// A window is index-addressable: its tokens are a pure function of (corpus seed, split, window,
// position) through a counter-based hash, so any batch can be regenerated from its index alone.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace eco {

class SyntheticCorpus {
 public:
  static constexpr int kSuccessors = 4;
  // Learnable in a few hundred steps by a small model, and far from both 0 and log(vocab).
  static constexpr std::array<double, kSuccessors> kProbs = {0.50, 0.25, 0.15, 0.10};
  static constexpr uint64_t kCorpusSeed = 0xEC0C0A9A5EEDull;  // fixed: not the training seed

  // vocab_size >= kSuccessors. split: 0 = train, 1 = val (disjoint random streams, same chain).
  SyntheticCorpus(int vocab_size, int split);

  // out (len): window `window` of this split. out[0] is uniform over the vocabulary and every
  // next token follows the chain.
  void window(int64_t window, int len, int32_t* out) const;

  // Successor j (0..K-1) of token s, taken with probability kProbs[j].
  int32_t successor(int32_t s, int j) const { return perms_[j][s]; }

  // H(p) = -sum_j p_j log p_j: the next-token loss floor when the predecessor is visible.
  double entropy_rate_nats() const;

  // A printable stand-in for a token: consonant-vowel syllables spelling the id in base 100
  // (least significant first: 0 "ba", 1 "be", ..., 99 "cu", 100 "babe"); distinct ids render
  // distinctly.
  static std::string render(int32_t token);
  // Tokens rendered and joined with spaces, for sample printing.
  static std::string render(const int32_t* tokens, size_t n);

  int vocab_size() const { return vocab_size_; }
  int split() const { return split_; }

 private:
  int vocab_size_;
  int split_;
  std::array<std::vector<int32_t>, kSuccessors> perms_;  // each (vocab_size)
};

}  // namespace eco
