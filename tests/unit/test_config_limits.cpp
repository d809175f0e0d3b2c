// What load_config refuses beyond wrong types: every integer bounded with the limit
// named, every number finite and in range, files that are not one small regular file, several
// YAML documents, and huge values quoted short; and the trajectory keys a resumed checkpoint
// must agree on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "base/error.h"

namespace fs = std::filesystem;
using eco::Config;

namespace {

constexpr const char* kOrigin = "cfg.yaml";
const std::string kBase = "data: {source: synthetic}\ntrain: {max_steps: 10}\n";

// Expects parse_config(kBase, overrides) to raise a usage error whose message holds every part.
void expect_refused(const std::vector<std::string>& overrides,
                    std::initializer_list<std::string> parts, const std::string& yaml = kBase) {
  try {
    eco::parse_config(yaml, kOrigin, overrides);
    ADD_FAILURE() << "accepted: " << (overrides.empty() ? yaml : overrides.back());
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage) << e.what();
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << e.what();
  }
}

// A scratch directory per test.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("eco_cfg_limits_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(ConfigLimits, ImplausibleIntegersNameTheirLimit) {
  expect_refused({"train.threads=1000000"}, {"train.threads", "at most 4 x this machine's cores"});
  expect_refused({"model.d_model=600000000"}, {"model.d_model", "[1, 1048576]", "600000000"});
  expect_refused({"model.n_layer=1000000000"}, {"model.n_layer", "[1, 4096]"});
  expect_refused({"train.grad_accum=1000000000"}, {"train.grad_accum", "16384"});
  expect_refused({"train.eval_batches=1000000000"}, {"train.eval_batches", "10000"});
  expect_refused({"train.sample_tokens=1000000000"}, {"train.sample_tokens", "100000"});
  expect_refused({"train.keep_checkpoints=0"}, {"train.keep_checkpoints"});
}

TEST(ConfigLimits, AnIntegerBeyondIntIsOutOfRangeNotNotAnInteger) {
  expect_refused({"model.n_layer=3000000000"}, {"model.n_layer", "integer in [", "3000000000"});
}

TEST(ConfigLimits, ThreadsUpToFourTimesTheCoresAreAccepted) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const Config c = eco::parse_config(kBase, kOrigin, {"train.threads=" + std::to_string(4 * cores)});
  EXPECT_EQ(c.train.threads, 4 * cores);
}

TEST(ConfigLimits, ThreadsAutoIsReadAndWrittenAsAuto) {
  const Config c = eco::parse_config(kBase, kOrigin, {"train.threads=auto"});
  EXPECT_EQ(c.train.threads, eco::TrainConfig::kThreadsAuto);
  const std::string yaml = eco::to_yaml(c);
  EXPECT_NE(yaml.find("threads: auto"), std::string::npos) << yaml;
  EXPECT_EQ(eco::parse_config(yaml, kOrigin, {}).train.threads, eco::TrainConfig::kThreadsAuto);
  for (const char* bad : {"train.threads=-1", "train.threads=Auto", "train.threads=2.5",
                          "train.threads=2x"})
    expect_refused({bad}, {"train.threads", "'auto'", std::string(bad).substr(14)});
}

TEST(ConfigLimits, TheLargestDModelKeepsTheDerivedMlpWidthExact) {
  // 4 d and 8 d / 3 are computed in 64 bits: no overflow at the bound.
  const Config g = eco::parse_config(kBase, kOrigin, {"model.d_model=1048576", "model.n_head=1"});
  EXPECT_EQ(g.model.mlp_hidden, 4 * 1048576);
  const Config l = eco::parse_config(kBase, kOrigin,
                                     {"model.family=llama", "model.d_model=1048576", "model.n_head=2"});
  EXPECT_EQ(l.model.mlp_hidden, (8LL * 1048576 / 3 + 255) / 256 * 256);
}

TEST(ConfigLimits, NegativeMaxTokensNamesMaxTokens) {
  expect_refused({"train.max_steps=0", "train.max_tokens=-1"}, {"'train.max_tokens'", "-1"});
}

TEST(ConfigLimits, EveryNumberMustBeFiniteAndSane) {
  for (const char* kv : {"optim.eps=.inf", "optim.eps=.nan", "optim.eps=2", "model.norm_eps=.inf",
                         "model.norm_eps=.nan", "optim.lr=1e300", "optim.lr=.nan",
                         "optim.weight_decay=.inf", "optim.grad_clip=.inf", "optim.beta1=.nan",
                         "optim.final_lr_frac=.nan", "model.rope_theta=.inf",
                         "train.sample_temperature=.inf", "train.sample_temperature=1e-9",
                         "train.spike_factor=.nan", "train.spike_factor=1"}) {
    const std::string key = std::string(kv).substr(0, std::string(kv).find('='));
    expect_refused({kv}, {"'" + key + "'"});
  }
}

TEST(ConfigLimits, DecayThatWouldFlipTheWeightsIsRefused) {
  expect_refused({"optim.lr=2", "optim.weight_decay=0.5"}, {"lr x weight_decay"});
}

TEST(ConfigLimits, SeveralYamlDocumentsAreRefused) {
  expect_refused({}, {kOrigin, "2 YAML documents"}, kBase + "---\ntrain: {max_steps: 3}\n");
}

TEST(ConfigLimits, AHugeValueIsQuotedShort) {
  const std::string value(100000, 'a');
  try {
    eco::parse_config(kBase + "model: {family: " + value + "}\n", kOrigin);
    FAIL() << "accepted";
  } catch (const eco::Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u);
    EXPECT_NE(std::string(e.what()).find("(100000 characters)"), std::string::npos) << e.what();
  }
}

TEST(ConfigLimits, ConfigFilesMustBeSmallRegularFiles) {
  TempDir dir;
  const fs::path fifo = dir.path / "fifo.yaml", big = dir.path / "big.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::ofstream(big) << kBase << "# " << std::string(2 << 20, 'x') << "\n";
  const auto refused = [](const std::string& path, const std::string& part) {
    try {
      eco::load_config(path);
      ADD_FAILURE() << path << " accepted";
    } catch (const eco::Error& e) {
      EXPECT_EQ(e.kind(), eco::ErrorKind::Usage);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused(fifo.string(), "not a regular file (a FIFO)");  // without blocking on the open
  refused(dir.path.string(), "is a directory");
  refused("/dev/zero", "not a regular file (a character device)");
  refused(big.string(), "more than the limit of 1048576 bytes");
}

TEST(ConfigLimits, SpikeKeysRoundTripWhenSetAndStayOutOfTheYamlOtherwise) {
  const Config d = eco::parse_config(kBase, kOrigin);
  EXPECT_EQ(eco::to_yaml(d).find("spike"), std::string::npos);
  const Config c =
      eco::parse_config(kBase, kOrigin, {"train.spike_factor=8", "train.spike_window=5"});
  const Config back = eco::parse_config(eco::to_yaml(c), "resolved");
  EXPECT_EQ(back.train.spike_factor, 8.0);
  EXPECT_EQ(back.train.spike_window, 5);
}

TEST(TrajectoryFingerprint, NamesEachKeyThatDiffersFromTheCheckpoint) {
  const Config saved = eco::parse_config(kBase, kOrigin);
  const Config now = eco::parse_config(
      kBase, kOrigin, {"train.seed=7", "optim.lr=1e-3", "train.batch_size=2", "optim.schedule=linear"});
  const auto d = eco::trajectory_differences(eco::to_yaml(saved), now);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], "optim.lr: 0.0003 in the checkpoint, 0.001 now");
  EXPECT_EQ(d[1], "optim.schedule: cosine in the checkpoint, linear now");
  EXPECT_EQ(d[2], "train.batch_size: 8 in the checkpoint, 2 now");
  EXPECT_EQ(d[3], "train.seed: 1337 in the checkpoint, 7 now");
}

TEST(TrajectoryFingerprint, KeysThatLeaveTheTrajectoryAloneMayChange) {
  const Config saved = eco::parse_config(kBase, kOrigin);
  const Config now = eco::parse_config(
      kBase, kOrigin, {"train.out_dir=elsewhere", "train.log_interval=3", "train.eval_batches=5",
                       "train.keep_checkpoints=9", "train.sample_tokens=0", "train.threads=1"});
  EXPECT_TRUE(eco::trajectory_differences(eco::to_yaml(saved), now).empty());
}

TEST(TrajectoryFingerprint, RunLengthCountsOnlyWhereTheScheduleDependsOnIt) {
  const Config cosine = eco::parse_config(kBase, kOrigin);
  EXPECT_EQ(eco::trajectory_differences(eco::to_yaml(cosine),
                                        eco::parse_config(kBase, kOrigin, {"train.max_steps=20"}))
                .size(),
            1u);
  const Config constant = eco::parse_config(kBase, kOrigin, {"optim.schedule=constant"});
  EXPECT_TRUE(eco::trajectory_differences(
                  eco::to_yaml(constant),
                  eco::parse_config(kBase, kOrigin, {"optim.schedule=constant", "train.max_steps=20"}))
                  .empty());
}
