// Data layer: token shards, decode tables, the deterministic loader and the synthetic corpus.
// Set ECO_TEST_SHARDS_DIR (colon-separated dirs written by data/prepare.py) to also check real
// prepared data: e.g. python data/prepare.py --input X --out /tmp/shk --tokenizer bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "data/decode_table.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/synthetic.h"

namespace fs = std::filesystem;
using eco::DataLoader;
using eco::LoaderOptions;

namespace {

// A fresh directory per test under /tmp, removed afterwards.
class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("eco_test_data_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Runs fn, expects an eco::Error of kind Data whose message contains every substring.
void expect_data_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected eco::Error (Data), nothing was thrown";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Data) << e.what();
    EXPECT_EQ(e.exit_code(), 3);
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << e.what();
  }
}

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Overwrites 4 bytes at `offset` of a file with an int32.
void patch_int32(const std::string& file, long offset, int32_t value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(reinterpret_cast<const char*>(&value), sizeof(value));
}

std::string read_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LoaderOptions options(int B, int T, int vocab, bool shuffle, int rank = 0, int world = 1) {
  return LoaderOptions{B, T, vocab, /*seed=*/1234, shuffle, rank, world};
}

// First tokens of the windows of batch `index` (each window in these tests starts with a unique
// token, so it identifies the window).
std::vector<int32_t> window_heads(const DataLoader& loader, int64_t index) {
  const auto& o = loader.options();
  std::vector<int32_t> in(o.batch_size * o.seq_len), tg(in.size());
  loader.batch(index, in.data(), tg.data());
  std::vector<int32_t> heads;
  for (int b = 0; b < o.batch_size; ++b) heads.push_back(in[b * o.seq_len]);
  return heads;
}

}  // namespace

// ---- shards -----------------------------------------------------------------------------------

using ShardFile = DataTest;

TEST_F(ShardFile, RoundTripsVersion1Uint16Tokens) {
  const std::vector<int32_t> tokens = {0, 1, 255, 256, 65535, 42};
  eco::write_shard(path("a.bin"), tokens, 1);
  EXPECT_EQ(fs::file_size(path("a.bin")), 1024u + 2 * tokens.size());
  const eco::Shard s = eco::load_shard(path("a.bin"), 65536);
  EXPECT_EQ(s.info.path, path("a.bin"));
  EXPECT_EQ(s.info.version, 1);
  EXPECT_EQ(s.info.num_tokens, 6);
  EXPECT_EQ(s.tokens, tokens);
}

TEST_F(ShardFile, RoundTripsVersion2Uint32Tokens) {
  const std::vector<int32_t> tokens = {0, 65536, 70000, 151935, 7};
  eco::write_shard(path("b.bin"), tokens, 2);
  EXPECT_EQ(fs::file_size(path("b.bin")), 1024u + 4 * tokens.size());
  const eco::Shard s = eco::load_shard(path("b.bin"), 151936);
  EXPECT_EQ(s.info.version, 2);
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_EQ(eco::read_shard_info(path("b.bin")).num_tokens, 5);
}

TEST_F(ShardFile, BadMagicNamesFileAndValues) {
  eco::write_shard(path("x.bin"), iota_tokens(10), 1);
  patch_int32(path("x.bin"), 0, 12345);
  expect_data_error([&] { eco::load_shard(path("x.bin")); },
                    {path("x.bin"), "magic", "12345", "20240520"});
}

TEST_F(ShardFile, UnknownVersionNamesFileAndValues) {
  eco::write_shard(path("x.bin"), iota_tokens(10), 1);
  patch_int32(path("x.bin"), 4, 3);
  expect_data_error([&] { eco::load_shard(path("x.bin")); }, {path("x.bin"), "version", "is 3"});
}

TEST_F(ShardFile, TruncatedFileNamesLengths) {
  eco::write_shard(path("x.bin"), iota_tokens(100), 1);
  fs::resize_file(path("x.bin"), 1024 + 150);
  expect_data_error([&] { eco::load_shard(path("x.bin")); },
                    {path("x.bin"), "length is 1174 bytes", "expected 1224"});
}

TEST_F(ShardFile, FileShorterThanHeaderIsRejected) {
  std::ofstream(path("x.bin")) << "tiny";
  expect_data_error([&] { eco::load_shard(path("x.bin")); }, {path("x.bin"), "header"});
}

TEST_F(ShardFile, TokenAtOrAboveVocabNamesTokenAndPosition) {
  std::vector<int32_t> tokens(200, 5);
  tokens[123] = 70000;
  eco::write_shard(path("x.bin"), tokens, 2);
  expect_data_error([&] { eco::load_shard(path("x.bin"), 256); },
                    {path("x.bin") + ": token 70000 at position 123 is >= model.vocab_size 256"});
  tokens[123] = 256;  // == vocab is out of range too
  eco::write_shard(path("y.bin"), tokens, 1);
  expect_data_error([&] { eco::load_shard(path("y.bin"), 256); }, {path("y.bin"), "token 256"});
  EXPECT_NO_THROW(eco::load_shard(path("y.bin"), 257));
}

TEST_F(ShardFile, MissingFileNamesFile) {
  expect_data_error([&] { eco::load_shard(path("nope.bin")); }, {path("nope.bin"), "No such file"});
}

TEST_F(ShardFile, GlobWithNoMatchNamesPattern) {
  expect_data_error([&] { eco::expand_shard_pattern(path("train_*.bin")); },
                    {path("train_*.bin"), "no token shard matches"});
}

TEST_F(ShardFile, GlobExpandsSortedAndPlainPathPassesThrough) {
  for (const char* name : {"train_000002.bin", "train_000000.bin", "train_000001.bin", "val.bin"})
    eco::write_shard(path(name), iota_tokens(4), 1);
  EXPECT_EQ(eco::expand_shard_pattern(path("train_*.bin")),
            (std::vector<std::string>{path("train_000000.bin"), path("train_000001.bin"),
                                      path("train_000002.bin")}));
  EXPECT_EQ(eco::expand_shard_pattern(path("val.bin")), std::vector<std::string>{path("val.bin")});
}

// ---- decode table -----------------------------------------------------------------------------

using DecodeTableFile = DataTest;

namespace {
void write_decode_table(const std::string& file, const std::vector<std::string>& tokens,
                        uint32_t magic = eco::kDecodeTableMagic) {
  std::ofstream out(file, std::ios::binary);
  const auto put = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  put(magic);
  put(static_cast<uint32_t>(tokens.size()));
  for (const std::string& t : tokens) {
    put(static_cast<uint32_t>(t.size()));
    out.write(t.data(), static_cast<std::streamsize>(t.size()));
  }
}
}  // namespace

TEST_F(DecodeTableFile, DecodesTokensToTheirBytes) {
  write_decode_table(path("d.bin"), {"a", "", "hello", std::string("\0\xff", 2), " world"});
  const eco::DecodeTable table = eco::DecodeTable::load(path("d.bin"));
  EXPECT_EQ(table.vocab_size(), 5);
  const int32_t ids[] = {2, 4, 1, 0, 3};
  EXPECT_EQ(table.decode(ids, 5), std::string("hello worlda\0\xff", 14));
  const int32_t outside[] = {0, 7};
  EXPECT_EQ(table.decode(outside, 2), "a<|7|>");  // padded vocab ids display, never throw
}

TEST_F(DecodeTableFile, BadMagicNamesFile) {
  write_decode_table(path("d.bin"), {"a"}, 0x12345678);
  expect_data_error([&] { eco::DecodeTable::load(path("d.bin")); },
                    {path("d.bin"), "magic", "0x12345678", "0x45434f44"});
}

TEST_F(DecodeTableFile, TruncatedFileNamesFileAndToken) {
  write_decode_table(path("d.bin"), {"abc", "defgh"});
  fs::resize_file(path("d.bin"), fs::file_size(path("d.bin")) - 2);
  expect_data_error([&] { eco::DecodeTable::load(path("d.bin")); },
                    {path("d.bin"), "truncated", "token 1"});
  expect_data_error([&] { eco::DecodeTable::load(path("missing.bin")); }, {path("missing.bin")});
}

// ---- loader over shards -----------------------------------------------------------------------

using ShardLoader = DataTest;

TEST_F(ShardLoader, SameIndexGivesSameBatchAndOtherIndicesDiffer) {
  eco::write_shard(path("s.bin"), iota_tokens(5000), 1);
  const DataLoader loader = DataLoader::from_shards(path("s.bin"), options(4, 16, 5000, true));
  std::vector<int32_t> in1(64), tg1(64), in2(64), tg2(64), in3(64), tg3(64);
  loader.batch(7, in1.data(), tg1.data());
  loader.batch(3, in3.data(), tg3.data());
  loader.batch(7, in2.data(), tg2.data());
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tg1, tg2);
  EXPECT_NE(in1, in3);
  // A second loader with the same options (as after a resume) serves the same batch.
  const DataLoader again = DataLoader::from_shards(path("s.bin"), options(4, 16, 5000, true));
  again.batch(7, in2.data(), tg2.data());
  EXPECT_EQ(in1, in2);
}

TEST_F(ShardLoader, TargetsAreInputsShiftedByOne) {
  eco::write_shard(path("s.bin"), iota_tokens(3000), 1);
  const int B = 3, T = 8;
  const DataLoader loader = DataLoader::from_shards(path("s.bin"), options(B, T, 3000, true));
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int64_t i = 0; i < 50; ++i) {
    loader.batch(i, in.data(), tg.data());
    for (int b = 0; b < B; ++b) {
      EXPECT_EQ(in[b * T] % T, 0) << "windows start at multiples of T";
      for (int t = 0; t < T; ++t) EXPECT_EQ(tg[b * T + t], in[b * T + t] + 1);  // token i == i
    }
  }
}

TEST_F(ShardLoader, UnshuffledServesWindowsInOrderAndNeverCrossesShards) {
  // Shard a: 33 tokens -> (33-1)/8 = 4 windows; shard b: 20 tokens -> 2 windows (4 unused tokens).
  eco::write_shard(path("a.bin"), iota_tokens(33, 0), 1);
  eco::write_shard(path("b.bin"), iota_tokens(20, 1000), 1);
  const DataLoader loader = DataLoader::from_shards(path("*.bin"), options(1, 8, 2000, false));
  EXPECT_EQ(loader.windows_per_epoch(), 6);
  EXPECT_EQ(loader.num_tokens(), 53);
  const std::vector<int32_t> expected = {0, 8, 16, 24, 1000, 1008, 0, 8};  // then epoch 1
  for (int i = 0; i < 8; ++i) EXPECT_EQ(window_heads(loader, i)[0], expected[i]) << "batch " << i;
  std::vector<int32_t> in(8), tg(8);
  loader.batch(3, in.data(), tg.data());  // last window of shard a ends exactly at its last token
  EXPECT_EQ(tg.back(), 32);
}

TEST_F(ShardLoader, RanksTakeDisjointWindowsThatCoverEachStep) {
  eco::write_shard(path("s.bin"), iota_tokens(4001), 1);  // 1000 windows of T=4
  const int B = 2, W = 3, T = 4;
  for (bool shuffle : {false, true}) {
    std::vector<DataLoader> ranks;
    for (int r = 0; r < W; ++r)
      ranks.push_back(DataLoader::from_shards(path("s.bin"), options(B, T, 4001, shuffle, r, W)));
    const DataLoader single =
        DataLoader::from_shards(path("s.bin"), options(B * W, T, 4001, shuffle));
    for (int64_t step = 0; step < 10; ++step) {
      std::multiset<int32_t> from_ranks;
      for (const DataLoader& l : ranks)
        for (int32_t h : window_heads(l, step)) from_ranks.insert(h);
      EXPECT_EQ(std::set<int32_t>(from_ranks.begin(), from_ranks.end()).size(), from_ranks.size())
          << "ranks overlap at step " << step;
      // Together the ranks cover exactly the global batch a single process with B*W rows gets.
      const std::vector<int32_t> whole = window_heads(single, step);
      EXPECT_EQ(from_ranks, std::multiset<int32_t>(whole.begin(), whole.end()));
    }
  }
}

TEST_F(ShardLoader, ShuffleIsAPermutationWithinEachEpoch) {
  const int T = 4, windows = 250;
  eco::write_shard(path("s.bin"), iota_tokens(windows * T + 1), 1);
  const DataLoader loader = DataLoader::from_shards(path("s.bin"), options(5, T, 2000, true));
  ASSERT_EQ(loader.windows_per_epoch(), windows);
  std::vector<int32_t> epoch0, epoch1;
  for (int64_t i = 0; i < 2 * windows / 5; ++i)
    for (int32_t h : window_heads(loader, i)) (i < windows / 5 ? epoch0 : epoch1).push_back(h);
  std::vector<int32_t> in_order(windows);
  for (int k = 0; k < windows; ++k) in_order[k] = k * T;
  EXPECT_NE(epoch0, in_order);
  EXPECT_NE(epoch0, epoch1) << "each epoch draws its own order";
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  EXPECT_EQ(epoch0, in_order);
  EXPECT_EQ(epoch1, in_order);
}

TEST(EpochPermutation, IsFixedForAGivenSeedAndEpoch) {
  // Pinned values (also produced by an independent Python transcription of splitmix64 +
  // Lemire + Fisher-Yates): a change here breaks bit-exact resume of runs that shuffle.
  const std::vector<int64_t> p = eco::epoch_permutation(10, 42, 0);
  EXPECT_EQ(p, (std::vector<int64_t>{5, 1, 9, 6, 7, 2, 4, 0, 8, 3}));
  EXPECT_EQ(eco::epoch_permutation(10, 42, 0), p);
  EXPECT_NE(eco::epoch_permutation(10, 42, 1), p);
  EXPECT_NE(eco::epoch_permutation(10, 43, 0), p);
}

TEST_F(ShardLoader, ShardTooShortForOneWindowIsAnErrorNamingIt) {
  eco::write_shard(path("a.bin"), iota_tokens(100), 1);
  eco::write_shard(path("b.bin"), iota_tokens(16), 1);
  expect_data_error([&] { DataLoader::from_shards(path("*.bin"), options(1, 16, 200, false)); },
                    {path("b.bin"), "16 tokens", "17"});
}

namespace {

// The loader's contract (loader.h) spelled out over the tokens a test wrote, to compare the
// loader's batches against: window k runs over the shards in order, tokens [j*T, j*T + T + 1)
// of its shard; slot s is window s % W of epoch s / W, permuted by epoch_permutation when
// shuffled; row b of rank r in batch i is slot (i*world + r)*B + b.
class ReferenceLoader {
 public:
  ReferenceLoader(const std::vector<std::vector<int32_t>>& shards, const LoaderOptions& o)
      : shards_(shards), o_(o) {
    for (size_t s = 0; s < shards.size(); ++s)
      for (int64_t j = 0; j < (static_cast<int64_t>(shards[s].size()) - 1) / o.seq_len; ++j)
        windows_.push_back({s, j * o.seq_len});
  }
  void batch(int64_t index, std::vector<int32_t>& in, std::vector<int32_t>& tg) const {
    const int T = o_.seq_len;
    const auto W = static_cast<int64_t>(windows_.size());
    in.assign(static_cast<size_t>(o_.batch_size) * T, -1);
    tg.assign(in.size(), -1);
    for (int b = 0; b < o_.batch_size; ++b) {
      const int64_t slot = (index * o_.world_size + o_.rank) * o_.batch_size + b;
      int64_t k = slot % W;
      if (o_.shuffle) k = eco::epoch_permutation(W, o_.seed, slot / W)[k];
      const auto [shard, start] = windows_[k];
      const int32_t* src = shards_[shard].data() + start;
      std::copy(src, src + T, in.begin() + b * T);
      std::copy(src + 1, src + T + 1, tg.begin() + b * T);
    }
  }

 private:
  const std::vector<std::vector<int32_t>>& shards_;
  LoaderOptions o_;
  std::vector<std::pair<size_t, int64_t>> windows_;  // (shard, first token)
};

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> draw(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = draw(gen);
  return v;
}

}  // namespace

// Three shards of 62, 20 and 4 windows of T = 16 (86 in all, with leftover tokens at each end),
// read for 2.5 epochs' worth of batches: every batch equals the reference's, byte for byte.
TEST_F(ShardLoader, StreamedBatchesEqualTheContractOverTheWrittenTokens) {
  const int T = 16, B = 3;
  for (int version : {1, 2}) {
    const int vocab = version == 1 ? 65536 : 151936;
    const std::vector<std::vector<int32_t>> shards = {
        random_tokens(1000, vocab, 1), random_tokens(332, vocab, 2), random_tokens(76, vocab, 3)};
    for (size_t s = 0; s < shards.size(); ++s)
      eco::write_shard(path(fmt::format("v{}_{}.bin", version, s)), shards[s], version);
    for (bool shuffle : {false, true}) {
      for (auto [rank, world] : {std::pair{0, 1}, {0, 2}, {1, 2}, {2, 3}}) {
        SCOPED_TRACE(
            fmt::format("version {} shuffle {} rank {}/{}", version, shuffle, rank, world));
        const LoaderOptions o = options(B, T, vocab, shuffle, rank, world);
        const DataLoader loader =
            DataLoader::from_shards(path(fmt::format("v{}_*.bin", version)), o);
        const ReferenceLoader reference(shards, o);
        ASSERT_EQ(loader.windows_per_epoch(), 86);
        std::vector<int32_t> in(B * T), tg(B * T), ref_in, ref_tg;
        for (int64_t i = 0; i < 86 * 5 / (2 * B * world) + 1; ++i) {
          loader.batch(i, in.data(), tg.data());
          reference.batch(i, ref_in, ref_tg);
          ASSERT_EQ(in, ref_in) << "batch " << i;
          ASSERT_EQ(tg, ref_tg) << "batch " << i;
        }
      }
    }
  }
}

TEST_F(ShardLoader, BatchesFromSeveralThreadsEqualThoseFromOne) {
  eco::write_shard(path("s.bin"), random_tokens(20000, 50000, 7), 1);
  const int B = 4, T = 32, batches = 64;
  const DataLoader loader = DataLoader::from_shards(path("s.bin"), options(B, T, 50000, true));
  std::vector<std::vector<int32_t>> alone(batches, std::vector<int32_t>(B * T));
  std::vector<int32_t> tg(B * T);
  for (int i = 0; i < batches; ++i) loader.batch(i, alone[i].data(), tg.data());
  std::vector<std::vector<int32_t>> threaded(batches, std::vector<int32_t>(B * T));
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      std::vector<int32_t> targets(B * T);
      for (int i = w; i < batches; i += 4) loader.batch(i, threaded[i].data(), targets.data());
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(threaded, alone);
}

TEST_F(ShardLoader, TokenOutsideTheVocabIsReportedWhenItsWindowIsRead) {
  // a.bin: 100 tokens, 12 windows of T = 8; b.bin: 50..149, token 100 at position 50 falls in
  // b's window 6 (positions 48..56), slot 12 + 6 unshuffled.
  eco::write_shard(path("a.bin"), iota_tokens(100), 1);
  eco::write_shard(path("b.bin"), iota_tokens(100, 50), 1);
  const DataLoader loader = DataLoader::from_shards(path("*.bin"), options(1, 8, 100, false));
  std::vector<int32_t> in(8), tg(8);
  for (int64_t i = 0; i < 18; ++i) EXPECT_NO_THROW(loader.batch(i, in.data(), tg.data())) << i;
  expect_data_error([&] { loader.batch(18, in.data(), tg.data()); },
                    {path("b.bin") + ": token 100 at position 50 is >= model.vocab_size 100"});
  // c.bin: 40 uint32 tokens, 4 windows (positions 0..32); token 70000 at 30 is in window 3, and
  // the one at 35, past the last window, is never read.
  std::vector<int32_t> tokens = random_tokens(40, 50, 9);
  tokens[30] = 70000;
  tokens[35] = 60000;
  eco::write_shard(path("c.bin"), tokens, 2);
  const DataLoader c = DataLoader::from_shards(path("c.bin"), options(1, 8, 50, false));
  EXPECT_NO_THROW(c.batch(2, in.data(), tg.data()));  // positions 16..24
  expect_data_error([&] { c.batch(3, in.data(), tg.data()); },
                    {path("c.bin") + ": token 70000 at position 30 is >= model.vocab_size 50"});
}

TEST_F(ShardLoader, ShardTruncatedAfterTheStartIsAnErrorNamingIt) {
  for (int version : {1, 2}) {
    SCOPED_TRACE(fmt::format("version {}", version));
    const std::string file = path(fmt::format("v{}.bin", version));
    eco::write_shard(file, iota_tokens(1000), version);
    const DataLoader loader = DataLoader::from_shards(file, options(1, 8, 1000, false));
    const int bytes = eco::shard_token_bytes(version);
    fs::resize_file(file, 1024 + bytes * 804);  // window 100 (tokens 800..808) is cut short
    std::vector<int32_t> in(8), tg(8);
    loader.batch(99, in.data(), tg.data());  // tokens 792..800 are still there
    EXPECT_EQ(in[0], 792);
    expect_data_error([&] { loader.batch(100, in.data(), tg.data()); },
                      {file, "short read", fmt::format("{} of {} bytes", 4 * bytes, 9 * bytes),
                       fmt::format("the file is {} bytes", 1024 + bytes * 804),
                       fmt::format("{} when opened", 1024 + bytes * 1000), "truncated"});
    fs::resize_file(file, 0);
    expect_data_error([&] { loader.batch(0, in.data(), tg.data()); },
                      {file, "short read", fmt::format("0 of {} bytes", 9 * bytes)});
  }
}

TEST(LoaderOptionsCheck, BadOptionsAreUsageErrors) {
  try {
    DataLoader::synthetic(0, options(4, 8, 256, false, /*rank=*/2, /*world=*/2));
    ADD_FAILURE() << "expected a usage error";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
}

// ---- synthetic corpus -------------------------------------------------------------------------

TEST(SyntheticCorpus, EntropyRateIsEntropyOfSuccessorProbabilities) {
  const eco::SyntheticCorpus corpus(256, 0);
  const double expected = -(0.5 * std::log(0.5) + 0.25 * std::log(0.25) + 0.15 * std::log(0.15) +
                            0.10 * std::log(0.10));
  EXPECT_NEAR(corpus.entropy_rate_nats(), expected, 1e-12);
  EXPECT_NEAR(corpus.entropy_rate_nats(), 1.2080, 1e-4);
  const DataLoader loader = DataLoader::synthetic(1, options(2, 8, 256, false));
  ASSERT_TRUE(loader.entropy_floor_nats().has_value());
  EXPECT_DOUBLE_EQ(*loader.entropy_floor_nats(), expected);
}

TEST(SyntheticCorpus, IsDoublyStochasticWithDistinctSuccessors) {
  for (int vocab : {4, 5, 17, 256, 50257}) {
    const eco::SyntheticCorpus corpus(vocab, 0);
    std::vector<double> in_mass(vocab, 0.0);  // column sums of the transition matrix
    for (int s = 0; s < vocab; ++s) {
      std::set<int32_t> next;
      for (int j = 0; j < eco::SyntheticCorpus::kSuccessors; ++j) {
        const int32_t t = corpus.successor(s, j);
        ASSERT_TRUE(t >= 0 && t < vocab);
        next.insert(t);
        in_mass[t] += eco::SyntheticCorpus::kProbs[j];
      }
      ASSERT_EQ(next.size(), size_t{eco::SyntheticCorpus::kSuccessors}) << "token " << s;
    }
    for (int t = 0; t < vocab; ++t) ASSERT_NEAR(in_mass[t], 1.0, 1e-12) << "vocab " << vocab;
  }
}

// ~1e6 transitions from the loader itself: the plug-in conditional entropy H(next | prev) has a
// bias of about -(K-1)*V/(2N) = -1e-4 nats and a standard error ~1e-3, so 0.01 nats is ~10 sigma.
// Token frequencies: each count ~ 15625 +- 125 (windows are short, so draws are nearly
// independent); a 5% band is ~6 sigma.
TEST(SyntheticCorpus, EmpiricalStatisticsMatchTheChain) {
  const int V = 64, B = 16, T = 256;
  const DataLoader loader = DataLoader::synthetic(0, options(B, T, V, true));
  std::vector<double> pair(V * V, 0.0), count(V, 0.0);
  std::vector<int32_t> in(B * T), tg(B * T);
  double n = 0;
  for (int64_t i = 0; n < 1e6; ++i) {
    loader.batch(i, in.data(), tg.data());
    for (int k = 0; k < B * T; ++k) {
      ASSERT_TRUE(in[k] >= 0 && in[k] < V && tg[k] >= 0 && tg[k] < V);
      pair[in[k] * V + tg[k]] += 1;
      count[in[k]] += 1;
      n += 1;
    }
  }
  double h = 0;
  for (int s = 0; s < V; ++s)
    for (int t = 0; t < V; ++t)
      if (pair[s * V + t] > 0) h -= pair[s * V + t] / n * std::log(pair[s * V + t] / count[s]);
  EXPECT_NEAR(h, *loader.entropy_floor_nats(), 0.01);
  for (int s = 0; s < V; ++s) EXPECT_NEAR(count[s] / n, 1.0 / V, 0.05 / V) << "token " << s;
}

TEST(SyntheticCorpus, WindowsAreRegeneratedFromTheirIndex) {
  const eco::SyntheticCorpus train(1000, 0), train2(1000, 0), val(1000, 1);
  std::vector<int32_t> a(65), b(65), c(65), d(65);
  train.window(123456789, 65, a.data());
  train2.window(123456789, 65, b.data());
  train.window(123456790, 65, c.data());
  val.window(123456789, 65, d.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d) << "train and val draw from different streams";
  for (int t = 1; t < 65; ++t) {  // every step is one of the chain's transitions
    bool ok = false;
    for (int j = 0; j < eco::SyntheticCorpus::kSuccessors; ++j)
      ok |= train.successor(a[t - 1], j) == a[t];
    EXPECT_TRUE(ok) << "position " << t;
  }
}

TEST(SyntheticCorpus, RendersDistinctPrintableSyllables) {
  EXPECT_EQ(eco::SyntheticCorpus::render(0), "ba");
  EXPECT_EQ(eco::SyntheticCorpus::render(100), "babe");
  std::set<std::string> seen;
  for (int32_t t = 0; t < 60000; ++t) seen.insert(eco::SyntheticCorpus::render(t));
  EXPECT_EQ(seen.size(), 60000u);
  const int32_t ids[] = {0, 1, 7};
  EXPECT_EQ(eco::SyntheticCorpus::render(ids, 3), "ba be di");
}

// ---- real data from data/prepare.py -----------------------------------------------------------

// For each prepared dir: shards load with the tokenizer's vocab, token counts agree with
// meta.json, bytes shards of one input without val decode back to it byte for byte, and the
// loader serves batches from them.
TEST(PreparedShards, LoadAndDecodeBackToTheSourceText) {
  const char* env = std::getenv("ECO_TEST_SHARDS_DIR");
  if (env == nullptr || *env == '\0')
    GTEST_SKIP() << "set ECO_TEST_SHARDS_DIR to dirs written by data/prepare.py (':'-separated)";
  std::stringstream dirs(env);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    SCOPED_TRACE(dir);
    const nlohmann::json meta = nlohmann::json::parse(read_file(dir + "/meta.json"));
    const int vocab = meta.at("vocab_size").get<int>();
    const eco::DecodeTable table = eco::DecodeTable::load(dir + "/decode_table.bin");
    EXPECT_EQ(table.vocab_size(), vocab);
    std::string decoded;
    int64_t total = 0;
    for (const char* split : {"train", "val"}) {
      if (!meta.at("splits").contains(split)) continue;  // --val-fraction 0
      int64_t tokens = 0;
      for (const std::string& p : eco::expand_shard_pattern(dir + "/" + split + "_*.bin")) {
        const eco::Shard s = eco::load_shard(p, vocab);
        EXPECT_EQ(s.info.version, vocab > 65535 ? 2 : 1);
        decoded += table.decode(s.tokens.data(), s.tokens.size());
        tokens += s.info.num_tokens;
      }
      EXPECT_EQ(tokens, meta.at("splits").at(split).at("tokens").get<int64_t>()) << split;
      total += tokens;
    }
    // Only bytes shards of one input with every document in train (--val-fraction 0) decode to
    // the input itself: other tokenizers write an end-of-text token between documents, and a
    // split by document interleaves train and val.
    if (meta.at("tokenizer") == "bytes" && meta.value("source", nlohmann::json()).is_string() &&
        meta.at("val_fraction").get<double>() == 0.0 && !meta.at("splits").contains("val")) {
      const std::string source = read_file(meta.at("source").get<std::string>());
      EXPECT_TRUE(decoded == source) << "decoded text differs from " << meta.at("source");
      EXPECT_EQ(total, static_cast<int64_t>(source.size()));
    }

    const DataLoader loader =
        DataLoader::from_shards(dir + "/train_*.bin", options(4, 64, vocab, true));
    EXPECT_GT(loader.windows_per_epoch(), 0);
    std::vector<int32_t> in(256), tg(256);
    loader.batch(0, in.data(), tg.data());
    std::string sample = table.decode(in.data(), 64).substr(0, 100);
    std::replace(sample.begin(), sample.end(), '\n', '|');
    std::cout << "[ sample   ] " << dir << ": " << sample << "\n"
              << "[ loader   ] " << loader.describe() << "\n";
  }
}
