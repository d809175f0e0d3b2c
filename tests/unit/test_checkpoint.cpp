// Checkpoint files: exact round trip, every kind of damage refused with the file named, atomic
// replacement (no .tmp left behind), and finding / pruning checkpoints in a run directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "train/checkpoint.h"
#include "train/training_state.h"

namespace fs = std::filesystem;
using eco::CheckpointState;

namespace {

// A fresh directory per test under /tmp, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("eco_test_ckpt_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// A state with every field set and sections of different sizes.
CheckpointState sample_state(int64_t step = 1234) {
  CheckpointState st;
  st.step = step;
  st.tokens = step * 4096 + 7;
  st.fingerprint = "family=llama n_layer=2 d_model=32";
  st.config_yaml = "model:\n  family: llama\n";
  std::vector<char> params(1000);
  for (size_t i = 0; i < params.size(); ++i) params[i] = char(i * 31 + 7);
  st.sections.emplace_back("params", params);
  st.sections.emplace_back("adamw.m", std::vector<char>{'\0', '\xff', 'm'});
  st.sections.emplace_back("adamw.v", std::vector<char>(64, '\x5a'));
  st.loss_spikes = {{4.25, 3.875, 3.5}, 3.875};
  return st;
}

void expect_same_state(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.config_yaml, b.config_yaml);
  ASSERT_EQ(a.sections.size(), b.sections.size());
  for (size_t i = 0; i < a.sections.size(); ++i) {
    EXPECT_EQ(a.sections[i].first, b.sections[i].first);
    EXPECT_EQ(a.sections[i].second, b.sections[i].second) << "section " << a.sections[i].first;
  }
  EXPECT_EQ(a.loss_spikes.recent, b.loss_spikes.recent);
  EXPECT_EQ(a.loss_spikes.lowest_median, b.loss_spikes.lowest_median);
}

// The file's CRC32 recomputed after an edit (its last 4 bytes).
void reseal(std::vector<char>& bytes) {
  const uint32_t crc = uint32_t(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// Runs fn, expects an eco::Error (checkpoint problems are exit code 1) whose message contains
// every part.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected eco::Error, nothing was thrown";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.exit_code(), 1) << e.what();
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << e.what();
  }
}

}  // namespace

// ---- the file ---------------------------------------------------------------------------------

using Checkpoint = CheckpointTest;

TEST_F(Checkpoint, RoundTripsEveryFieldAndSection) {
  const CheckpointState st = sample_state();
  eco::save_checkpoint(path("c.bin"), st);
  expect_same_state(eco::load_checkpoint(path("c.bin")), st);
}

TEST_F(Checkpoint, RoundTripsAnEmptyState) {
  eco::save_checkpoint(path("c.bin"), CheckpointState{});
  expect_same_state(eco::load_checkpoint(path("c.bin")), CheckpointState{});
}

TEST_F(Checkpoint, RoundTripsAnEmptySection) {
  CheckpointState st = sample_state();
  st.sections.emplace_back("empty", std::vector<char>{});
  eco::save_checkpoint(path("c.bin"), st);
  expect_same_state(eco::load_checkpoint(path("c.bin")), st);
}

TEST_F(Checkpoint, AVersionOneFileLoadsWithAFreshLossSpikeWindow) {
  // Version 1 is version 2 without the loss-spike record (u32 count, f64 lowest median).
  CheckpointState st = sample_state();
  st.loss_spikes = {};
  eco::save_checkpoint(path("c.bin"), st);
  std::vector<char> bytes = read_bytes(path("c.bin"));
  bytes.erase(bytes.end() - 4 - 12, bytes.end() - 4);
  const uint32_t one = 1;
  std::memcpy(bytes.data() + 8, &one, 4);
  reseal(bytes);
  write_bytes(path("v1.bin"), bytes);
  const CheckpointState loaded = eco::load_checkpoint(path("v1.bin"));
  expect_same_state(loaded, st);
  EXPECT_TRUE(loaded.loss_spikes.recent.empty());
  EXPECT_EQ(loaded.loss_spikes.lowest_median, std::numeric_limits<double>::infinity());
}

TEST_F(Checkpoint, AnUnknownVersionIsRefusedNamingIt) {
  eco::save_checkpoint(path("c.bin"), sample_state());
  std::vector<char> bytes = read_bytes(path("c.bin"));
  const uint32_t three = 3;
  std::memcpy(bytes.data() + 8, &three, 4);
  reseal(bytes);
  write_bytes(path("v3.bin"), bytes);
  expect_error([&] { eco::load_checkpoint(path("v3.bin")); },
               {path("v3.bin"), "checkpoint version 3 is not supported (expected 1 to 2)"});
}

TEST_F(Checkpoint, ACrcValidLossSpikeRecordNoRunWritesIsCorrupt) {
  CheckpointState nan_loss = sample_state();
  nan_loss.loss_spikes.recent[1] = std::nan("");
  eco::save_checkpoint(path("nan.bin"), nan_loss);
  expect_error([&] { eco::load_checkpoint(path("nan.bin")); },
               {path("nan.bin"), "corrupt checkpoint: the loss-spike window holds nan"});
  CheckpointState no_median = sample_state();
  no_median.loss_spikes.lowest_median = std::numeric_limits<double>::infinity();
  eco::save_checkpoint(path("inf.bin"), no_median);
  expect_error([&] { eco::load_checkpoint(path("inf.bin")); },
               {path("inf.bin"), "corrupt checkpoint: lowest running loss median inf for 3 losses"});
}

TEST_F(Checkpoint, SectionLookupNamesTheFileWhenMissing) {
  const CheckpointState st = sample_state();
  EXPECT_EQ(st.section("adamw.m", "c.bin").size(), 3u);
  expect_error([&] { st.section("adamw.x", "c.bin"); }, {"c.bin", "adamw.x"});
}

TEST_F(Checkpoint, AnySingleFlippedByteIsRefused) {
  eco::save_checkpoint(path("c.bin"), sample_state());
  const std::vector<char> good = read_bytes(path("c.bin"));
  const size_t n = good.size();
  // Magic, version, step, the fingerprint, the middle of the params blob, the stored CRC.
  for (size_t pos : {size_t(0), size_t(7), size_t(8), size_t(12), size_t(30), n / 2, n - 5, n - 1}) {
    std::vector<char> bad = good;
    bad[pos] = char(bad[pos] ^ 0x01);
    write_bytes(path("c.bin"), bad);
    SCOPED_TRACE(fmt::format("flipped byte {} of {}", pos, n));
    expect_error([&] { eco::load_checkpoint(path("c.bin")); }, {path("c.bin")});
  }
}

TEST_F(Checkpoint, TruncationAtAnyLengthIsRefused) {
  eco::save_checkpoint(path("c.bin"), sample_state());
  const std::vector<char> good = read_bytes(path("c.bin"));
  const size_t n = good.size();
  for (size_t len : {size_t(0), size_t(4), size_t(8), size_t(11), size_t(12), size_t(40), n / 2,
                     n - 4, n - 1}) {
    write_bytes(path("c.bin"), std::vector<char>(good.begin(), good.begin() + long(len)));
    SCOPED_TRACE(fmt::format("truncated to {} of {} bytes", len, n));
    expect_error([&] { eco::load_checkpoint(path("c.bin")); }, {path("c.bin")});
  }
}

TEST_F(Checkpoint, TrailingGarbageIsRefused) {
  eco::save_checkpoint(path("c.bin"), sample_state());
  std::vector<char> bytes = read_bytes(path("c.bin"));
  bytes.push_back('x');
  write_bytes(path("c.bin"), bytes);
  expect_error([&] { eco::load_checkpoint(path("c.bin")); }, {path("c.bin")});
}

TEST_F(Checkpoint, FileThatIsNotACheckpointIsRefusedForBadMagic) {
  const std::string text = "model:\n  family: gpt2\n  n_layer: 12\n";
  write_bytes(path("config.yaml"), std::vector<char>(text.begin(), text.end()));
  expect_error([&] { eco::load_checkpoint(path("config.yaml")); }, {path("config.yaml"), "bad magic"});
}

TEST_F(Checkpoint, MissingFileIsRefusedNamingIt) {
  expect_error([&] { eco::load_checkpoint(path("absent.bin")); }, {path("absent.bin"), "cannot open"});
}

TEST_F(Checkpoint, DirectoryIsRefusedNamingIt) {
  expect_error([&] { eco::load_checkpoint(dir_.string()); }, {dir_.string()});
}

// ---- atomic saving ----------------------------------------------------------------------------

TEST_F(Checkpoint, SaveLeavesNoTempFile) {
  eco::save_checkpoint(path("c.bin"), sample_state());
  EXPECT_EQ(listing(), std::vector<std::string>{"c.bin"});
}

TEST_F(Checkpoint, SaveOverwritesAStaleTempFileFromACrashedSave) {
  write_bytes(path("c.bin.tmp"), std::vector<char>(5000, 'z'));
  eco::save_checkpoint(path("c.bin"), sample_state());
  EXPECT_EQ(listing(), std::vector<std::string>{"c.bin"});
  expect_same_state(eco::load_checkpoint(path("c.bin")), sample_state());
}

TEST_F(Checkpoint, SavingOverAnExistingCheckpointReplacesIt) {
  eco::save_checkpoint(path("c.bin"), sample_state(1));
  eco::save_checkpoint(path("c.bin"), sample_state(2));
  EXPECT_EQ(eco::load_checkpoint(path("c.bin")).step, 2);
  EXPECT_EQ(listing(), std::vector<std::string>{"c.bin"});
}

TEST_F(Checkpoint, FailedSaveLeavesThePreviousCheckpointIntact) {
  // Make the temp file impossible to create (a directory sits at its name): the old file must
  // survive unchanged, which is the point of writing to a temp file and renaming.
  eco::save_checkpoint(path("c.bin"), sample_state(1));
  const std::vector<char> before = read_bytes(path("c.bin"));
  fs::create_directory(path("c.bin.tmp"));
  expect_error([&] { eco::save_checkpoint(path("c.bin"), sample_state(2)); }, {path("c.bin")});
  EXPECT_EQ(read_bytes(path("c.bin")), before);
}

TEST_F(Checkpoint, SaveIntoAMissingDirectoryNamesThePathAndLeavesNothing) {
  const std::string target = path("no_such_dir/c.bin");
  expect_error([&] { eco::save_checkpoint(target, sample_state()); }, {target});
  EXPECT_FALSE(fs::exists(path("no_such_dir")));
  EXPECT_TRUE(listing().empty());
}

// ---- run directories --------------------------------------------------------------------------

using CheckpointFiles = CheckpointTest;

TEST_F(CheckpointFiles, NameIsZeroPaddedStep) {
  EXPECT_EQ(eco::checkpoint_name(0), "ckpt_00000000.bin");
  EXPECT_EQ(eco::checkpoint_name(1234), "ckpt_00001234.bin");
}

TEST_F(CheckpointFiles, LatestPicksTheHighestStep) {
  for (int64_t step : {9, 100, 20}) eco::save_checkpoint(path(eco::checkpoint_name(step)), sample_state(step));
  EXPECT_EQ(eco::latest_checkpoint(dir_.string()), path("ckpt_00000100.bin"));
}

TEST_F(CheckpointFiles, LatestIgnoresUnrelatedAndTempFiles) {
  eco::save_checkpoint(path(eco::checkpoint_name(5)), sample_state(5));
  for (const char* name : {"ckpt_00000900.bin.tmp", "ckpt_00000800.txt", "xckpt_0000700.bin",
                           "ckpt_0000600.bin", "summary.json", "ckpt_abcdefgh.bin"})
    write_bytes(path(name), {'x'});
  fs::create_directory(path("ckpt_dir"));
  EXPECT_EQ(eco::latest_checkpoint(dir_.string()), path("ckpt_00000005.bin"));
}

TEST_F(CheckpointFiles, LatestOfAnEmptyOrMissingDirectoryIsEmpty) {
  EXPECT_EQ(eco::latest_checkpoint(dir_.string()), "");
  EXPECT_EQ(eco::latest_checkpoint(path("missing")), "");
}

TEST_F(CheckpointFiles, LatestFindsStepsBeyondEightDigits) {
  eco::save_checkpoint(path(eco::checkpoint_name(99999999)), sample_state(99999999));
  eco::save_checkpoint(path(eco::checkpoint_name(100000000)), sample_state(100000000));
  EXPECT_EQ(eco::latest_checkpoint(dir_.string()), path(eco::checkpoint_name(100000000)));
}

TEST_F(CheckpointFiles, PruneKeepsTheNewestN) {
  for (int64_t step : {10, 40, 20, 30, 50}) eco::save_checkpoint(path(eco::checkpoint_name(step)), sample_state(step));
  write_bytes(path("summary.json"), {'{', '}'});
  eco::prune_checkpoints(dir_.string(), 2);
  EXPECT_EQ(listing(), (std::vector<std::string>{"ckpt_00000040.bin", "ckpt_00000050.bin", "summary.json"}));
}

TEST_F(CheckpointFiles, PruneWithFewerThanNKeepsAll) {
  eco::save_checkpoint(path(eco::checkpoint_name(1)), sample_state(1));
  eco::prune_checkpoints(dir_.string(), 3);
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt_00000001.bin"});
}

// ---- values no run writes ---------------------------------------------------------------------

TEST_F(Checkpoint, ACrcValidNegativeStepIsCorrupt) {
  eco::save_checkpoint(path("c.bin"), sample_state(-5));
  expect_error([&] { eco::load_checkpoint(path("c.bin")); },
               {path("c.bin"), "corrupt checkpoint: step -5"});
}

TEST_F(Checkpoint, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo.bin").c_str(), 0644), 0);
  expect_error([&] { eco::load_checkpoint(path("fifo.bin")); }, {"fifo.bin", "not a regular file"});
}

TEST(CheckpointGuard, FindsTheFirstNonFiniteFloatAndIgnoresCodes) {
  CheckpointState st;
  const float ok[3] = {1.0f, -2.0f, 0.0f};
  const float bad[3] = {1.0f, std::numeric_limits<float>::infinity(), 0.0f};
  const auto blob = [](const float* f) {
    return std::vector<char>(reinterpret_cast<const char*>(f), reinterpret_cast<const char*>(f + 3));
  };
  st.sections = {{"codes", std::vector<char>(3, '\xff')}, {"w", blob(ok)}, {"w.m", blob(bad)}};
  eco::NamedTensors tensors;
  for (const auto& [name, bytes] : st.sections) {
    eco::Tensor t;
    t.shape = {3};
    t.dtype = name == "codes" ? eco::DType::U8 : eco::DType::F32;
    tensors.emplace_back(name, t);
  }
  EXPECT_EQ(eco::first_non_finite(st, tensors), "'w.m' holds inf at element 1");
  st.sections[2].second = blob(ok);
  EXPECT_EQ(eco::first_non_finite(st, tensors), "");
}
