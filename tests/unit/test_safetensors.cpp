// The safetensors reader and writer (src/hf/safetensors.h) and Hugging Face checkpoint directories
// (src/hf/hf_checkpoint.h): what the writer lays out, and one clear error for each way a file can
// lie (truncation, header length, offsets that overlap, leave gaps or run out, dtypes, shapes,
// duplicate names, JSON). The other direction, files of the Python package, is covered by
// test_hf_fixtures.cpp (save_pretrained's files) and by transformers reading our exports.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "temp_dir.h"
#include "hf/hf_checkpoint.h"
#include "hf/safetensors.h"

namespace {

namespace fs = std::filesystem;

using eco::test::TempDir;

// A file of an 8-byte length, `header` and `data`; `length` overrides the length field.
std::string write_raw(const TempDir& d, const std::string& header, const std::string& data,
                      int64_t length = -1) {
  const std::string path = d.file("t.safetensors");
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = length >= 0 ? uint64_t(length) : header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return path;
}

void expect_data_error(const std::string& path, const std::string& part) {
  try {
    eco::SafetensorsFile f(path);
    ADD_FAILURE() << "expected a data error containing '" << part << "'";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Data) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

eco::SafetensorsOutput floats(const std::string& name, std::vector<int64_t> shape,
                              std::vector<float> v) {
  return {name, eco::StDType::F32, std::move(shape),
          [v](char* dst) { std::memcpy(dst, v.data(), v.size() * 4); }};
}

TEST(Safetensors, WriterRoundTripsTensorsAndMetadataWithAlignedData) {
  TempDir d;
  const std::vector<uint16_t> halves = {0x3F80, 0xC000, 0x0001};  // bf16 1, -2, tiny
  std::vector<eco::SafetensorsOutput> out = {
      {"b", eco::StDType::BF16, {3}, [&](char* p) { std::memcpy(p, halves.data(), 6); }},
      {"codes", eco::StDType::U8, {2, 2}, [](char* p) { std::memcpy(p, "\x01\x02\x03\x04", 4); }},
      floats("a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}),
      floats("scalar", {}, {7})};
  eco::write_safetensors(d.file("m.safetensors"), out, {{"format", "pt"}});
  const eco::SafetensorsFile f(d.file("m.safetensors"));
  ASSERT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // F32 first (largest elements), then BF16, then U8: each tensor aligned to its element size.
  EXPECT_EQ(f.entries()[0].name, "a.weight");
  EXPECT_EQ(f.entries()[1].name, "scalar");
  EXPECT_EQ(f.entries()[2].name, "b");
  EXPECT_EQ(f.entries()[3].name, "codes");
  for (const auto& e : f.entries()) EXPECT_EQ(e.begin % eco::st_dtype_size(e.dtype), 0u);
  // The header is padded so that the data starts at a multiple of 8.
  std::ifstream in(d.file("m.safetensors"), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(f.read_floats(*f.find("a.weight")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.read_floats(*f.find("scalar")), std::vector<float>{7});
  EXPECT_EQ(f.find("scalar")->shape.size(), 0u);
  const std::vector<float> b = f.read_floats(*f.find("b"));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.0f);
  EXPECT_EQ(b[2], std::ldexp(1.0f, -133));  // the smallest bf16 subnormal, exact
  EXPECT_EQ(f.read_bytes(*f.find("codes")), (std::vector<char>{1, 2, 3, 4}));
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, F16WidensExactlyIncludingSubnormalsAndInfinity) {
  EXPECT_EQ(eco::f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(eco::f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(eco::f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(eco::f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(eco::f16_to_float(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(eco::f16_to_float(0x8000)));
  EXPECT_TRUE(std::isinf(eco::f16_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(eco::f16_to_float(0x7E00)));
}

TEST(Safetensors, FileShorterThanTheLengthFieldIsTruncated) {
  TempDir d;
  const std::string path = d.file("short.safetensors");
  std::ofstream(path) << "abc";
  expect_data_error(path, "truncated safetensors file (3 bytes");
}

TEST(Safetensors, HeaderLengthBeyondTheFileIsRefused) {
  TempDir d;
  expect_data_error(write_raw(d, "{}", "", 1000), "header length 1000 runs past the end of the file");
  expect_data_error(write_raw(d, "{}", "", int64_t(1) << 40), "exceeds the format's limit");
}

TEST(Safetensors, InvalidJsonIsRefused) {
  TempDir d;
  expect_data_error(write_raw(d, R"({"a": {"dtype": "F32", )", ""), "not valid JSON");
  expect_data_error(write_raw(d, "[1, 2]", ""), "does not start with a JSON object");
}

TEST(Safetensors, DuplicateTensorNamesAreRefused) {
  TempDir d;
  expect_data_error(
      write_raw(d,
                R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                std::string(8, '\0')),
      "names 'a' twice");
}

TEST(Safetensors, UnknownDtypeIsRefused) {
  TempDir d;
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}})", "x"),
      "unknown dtype 'Q8'");
}

TEST(Safetensors, ShapeTimesDtypeMustBeTheByteLength) {
  TempDir d;
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
                std::string(20, '\0')),
      "span 20 bytes, but shape [2,3] of F32 takes 24");
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                std::string(4, '\0')),
      "non-negative integers");
}

TEST(Safetensors, OffsetsPastTheDataRegionAreRefused) {
  TempDir d;
  // A file cut short inside its data: the header still promises 16 bytes.
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                std::string(10, '\0')),
      "data_offsets [0, 16] run past the data region of 10 bytes");
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
                std::string(8, '\0')),
      "end before they begin");
}

TEST(Safetensors, OverlappingTensorsAreRefused) {
  TempDir d;
  expect_data_error(
      write_raw(d,
                R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                std::string(12, '\0')),
      "tensors 'a' and 'b' overlap");
}

TEST(Safetensors, GapsAndUnclaimedBytesAreRefused) {
  TempDir d;
  expect_data_error(
      write_raw(d,
                R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                std::string(12, '\0')),
      "a gap in the data region: bytes [4, 8) before tensor 'b'");
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                std::string(6, '\0')),
      "2 bytes belong to no tensor");
}

TEST(Safetensors, MalformedEntriesAreRefused) {
  TempDir d;
  expect_data_error(write_raw(d, R"({"a": {"dtype": "F32", "shape": [1]}})", std::string(4, 0)),
                    "data_offsets must be [begin, end]");
  expect_data_error(
      write_raw(d, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})",
                std::string(4, 0)),
      "unknown key 'x'");
  expect_data_error(write_raw(d, R"({"__metadata__": {"k": 3}})", ""),
                    "__metadata__ 'k' is not a string");
}

TEST(Safetensors, ReadingIntegersAsWeightsNamesTheDtype) {
  TempDir d;
  const eco::SafetensorsFile f(write_raw(
      d, R"({"steps": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
      std::string("\1\0\0\0", 4)));
  try {
    f.read_floats(*f.find("steps"));
    ADD_FAILURE() << "I32 read as floats";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("'steps' has dtype I32, expected F32, BF16 or F16"),
              std::string::npos)
        << e.what();
  }
}

// ---- checkpoint directories -------------------------------------------------------------------

std::vector<eco::SafetensorsOutput> three_tensors() {
  return {floats("x", {4}, {1, 2, 3, 4}), floats("y", {4}, {5, 6, 7, 8}),
          floats("z", {2}, {9, 10})};
}

TEST(HfCheckpointDir, AboveTheShardLimitWritesShardsAndAnIndex) {
  TempDir d;
  const auto files = eco::write_hf_weights(d.path, three_tensors(), 20, {{"format", "pt"}});
  // x (16 bytes) | y (16: with x, 32 > 20) | z (8: with y, 24 > 20), then the index.
  ASSERT_EQ(files.size(), 4u);
  EXPECT_TRUE(fs::exists(d.file("model-00003-of-00003.safetensors")));
  EXPECT_TRUE(fs::exists(d.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(d.file("model.safetensors")));
  const eco::HfCheckpoint ck(d.path);
  ASSERT_EQ(ck.tensors().size(), 3u);
  const auto* z = ck.find("z");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->file->read_floats(*z->entry), (std::vector<float>{9, 10}));
  // Re-exported below the limit: one file, the old shards and index gone.
  eco::write_hf_weights(d.path, three_tensors(), 1000, {});
  EXPECT_TRUE(fs::exists(d.file("model.safetensors")));
  EXPECT_FALSE(fs::exists(d.file("model.safetensors.index.json")));
  for (const auto& e : fs::directory_iterator(d.path))
    EXPECT_EQ(e.path().filename().string().rfind("model-", 0), std::string::npos);
  EXPECT_EQ(eco::HfCheckpoint(d.path).tensors().size(), 3u);
}

TEST(HfCheckpointDir, ATensorLargerThanTheLimitGetsAShardOfItsOwn) {
  TempDir d;
  eco::write_hf_weights(d.path, three_tensors(), 24, {});  // x | y + z (24 bytes, at the limit)
  EXPECT_TRUE(fs::exists(d.file("model-00002-of-00002.safetensors")));
  eco::write_hf_weights(d.path, three_tensors(), 4, {});  // every tensor over the limit
  EXPECT_TRUE(fs::exists(d.file("model-00003-of-00003.safetensors")));
  EXPECT_FALSE(fs::exists(d.file("model-00002-of-00002.safetensors")));
  EXPECT_EQ(eco::HfCheckpoint(d.path).tensors().size(), 3u);
}

// An export clears exactly its own files: model.safetensors, the index, and shard names of the
// form model-NNNNN-of-NNNNN.safetensors (five digits each); every other file stays.
TEST(HfCheckpointDir, AnExportRemovesOnlyItsOwnFileNames) {
  TempDir d;
  const std::vector<std::string> kept = {
      "model-0001-of-00002.safetensors",   "model-000001-of-00002.safetensors",
      "model-00001-of-0000x.safetensors",  "model-00001-of-00002.safetensors.bak",
      "xmodel-00001-of-00002.safetensors", "model-00001_of-00002.safetensors",
      "model-00001-of-00002.safetensorz",  "config.json"};
  const std::vector<std::string> removed = {"model-00001-of-00002.safetensors",
                                            "model-99999-of-12345.safetensors"};
  for (const auto& names : {kept, removed})
    for (const std::string& name : names) std::ofstream(d.file(name)) << "x";
  eco::write_hf_weights(d.path, three_tensors(), 1000, {});
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(d.file(name))) << name;
  for (const std::string& name : removed) EXPECT_FALSE(fs::exists(d.file(name))) << name;
  EXPECT_TRUE(fs::exists(d.file("model.safetensors")));
}

void expect_dir_error(const std::string& dir, const std::string& part) {
  try {
    eco::HfCheckpoint ck(dir);
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const eco::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(HfCheckpointDir, AnIndexThatDisagreesWithItsShardsIsRefused) {
  TempDir d;
  eco::write_hf_weights(d.path, three_tensors(), 24, {});  // x | y + z
  const std::string index = d.file("model.safetensors.index.json");
  std::ofstream(index) << R"({"weight_map": {"x": "model-00001-of-00002.safetensors",)"
                          R"( "w": "model-00002-of-00002.safetensors"}})";
  expect_dir_error(d.path, "lists tensor 'w' in model-00002-of-00002.safetensors, which does not "
                           "hold it");
  std::ofstream(index) << R"({"weight_map": {"x": "model-00001-of-00002.safetensors",)"
                          R"( "y": "model-00002-of-00002.safetensors"}})";
  expect_dir_error(d.path, "holds tensor 'z', which");
  expect_dir_error(d.path, "does not list");
  std::ofstream(index) << R"({"weight_map": {"x": "../elsewhere.safetensors"}})";
  expect_dir_error(d.path, "not a file in the same directory");
  std::ofstream(index) << "{not json";
  expect_dir_error(d.path, "not valid JSON");
}

TEST(HfCheckpointDir, ADirectoryWithoutWeightsIsRefused) {
  TempDir d;
  expect_dir_error(d.path, "holds neither model.safetensors nor model.safetensors.index.json");
  expect_dir_error(d.file("nope"), "not a directory");
}

}  // namespace
