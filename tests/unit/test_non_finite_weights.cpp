// Weights on their way in are finite or refused: the scan (base/math/non_finite.h), the CPU
// backend's quantize, which would otherwise give a NaN or an infinity a code, and ParamStore::set,
// which checks the host values of a quantized parameter before either backend sees them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/backend.h"
#include "base/error.h"
#include "base/math/non_finite.h"
#include "core/config.h"
#include "expect_usage_error.h"
#include "model/transformer.h"

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NonFinite, FindsTheFirstAndCountsEveryNanAndInfinity) {
  const std::vector<float> x = {1.0f, -0.0f, 3e38f, -kInf, 2.0f, kNan, kInf};
  const eco::NonFinite bad = eco::find_non_finite(x.data(), int64_t(x.size()));
  EXPECT_TRUE(bad);
  EXPECT_EQ(bad.count, 3);
  EXPECT_EQ(bad.first, 3);
  EXPECT_EQ(bad.value, -INFINITY);
  const std::vector<double> wide = {0.0, 1e308, -1e-320, std::nan("")};
  const eco::NonFinite w = eco::find_non_finite(wide.data(), int64_t(wide.size()));
  EXPECT_EQ(w.count, 1);
  EXPECT_EQ(w.first, 3);
  EXPECT_TRUE(std::isnan(w.value));
}

TEST(NonFinite, FiniteValuesAndEmptyArraysHaveNone) {
  const std::vector<float> x = {0.0f, std::numeric_limits<float>::max(),
                                -std::numeric_limits<float>::denorm_min()};
  EXPECT_FALSE(eco::find_non_finite(x.data(), int64_t(x.size())));
  EXPECT_FALSE(eco::find_non_finite(x.data(), 0));
  EXPECT_EQ(eco::find_non_finite(x.data(), 0).first, -1);
}

TEST(CpuQuantize, RefusesANonFiniteElementBeforeWritingACode) {
  const auto be = eco::make_cpu_backend(eco::DType::F32);
  for (const eco::QFormat f : {eco::QFormat::E4M3, eco::QFormat::INT4}) {
    for (const float poison : {kNan, kInf, -kInf}) {
      std::vector<float> x(4 * 6, 0.5f);
      x[2 * 6 + 3] = poison;  // row 2, column 3
      std::vector<uint8_t> codes(size_t(eco::code_bytes(f, 24)), 0xCD);
      std::vector<float> scales(4, -1.0f);
      eco::QTensor q = eco::qtensor_view(f, eco::Granularity::PerRow, 4, 6, codes.data(),
                                         scales.data());
      expect_data_error(
          [&] { be->quantize(q, eco::Tensor{x.data(), {4, 6}, eco::DType::F32},
                             eco::Rounding::SR, 1, 2, 3); },
          {"element 15 (row 2, column 3) of a (4, 6) weight", "non-finite value has no",
           eco::qformat_name(f)});
      EXPECT_EQ(codes, std::vector<uint8_t>(codes.size(), 0xCD)) << "codes written";
      EXPECT_EQ(scales, std::vector<float>(4, -1.0f)) << "scales written";
    }
  }
}

// A quantized run's store (gpt2 blocks under int4-eco-sr: codes and scales, no master).
struct QuantizedStore {
  QuantizedStore()
      : cfg(eco::parse_config("model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 16, "
                              "vocab_size: 24, seq_len: 8}\ndata: {source: synthetic}\n"
                              "train: {max_steps: 1}\nprecision: {treatment: int4-eco-sr}\n",
                              "test.yaml")),
        be(eco::make_cpu_backend(eco::DType::F32)),
        model(std::make_unique<eco::Transformer>(cfg.model, *be, 1, cfg.precision.treatment,
                                                 cfg.precision.quantize)) {}
  eco::Config cfg;
  std::unique_ptr<eco::Backend> be;
  std::unique_ptr<eco::Transformer> model;
};

TEST(ParamStoreSet, RefusesNonFiniteValuesOfAQuantizedParameterAndKeepsItsCodes) {
  QuantizedStore s;
  eco::ParamStore& store = s.model->store();
  const int i = store.table().index_of("h.0.attn.qkv.weight");
  ASSERT_GE(i, 0);
  ASSERT_TRUE(store.quantized(size_t(i)));
  s.model->init_weights(5);
  std::vector<float> before(size_t(store.table().specs[size_t(i)].numel()));
  store.get(size_t(i), before.data());

  std::vector<float> bad(before.size(), 0.25f);
  bad[17] = kNan;
  bad[40] = kInf;
  expect_data_error([&] { store.set(size_t(i), bad.data()); },
                    {"parameter 'h.0.attn.qkv.weight'", "element 17 is nan",
                     "2 non-finite in all", "no int4 code", "nothing was stored"});
  std::vector<float> after(before.size());
  store.get(size_t(i), after.data());
  EXPECT_EQ(after, before);
}

TEST(ParamStoreSet, StoresFiniteValuesOfAQuantizedParameter) {
  QuantizedStore s;
  eco::ParamStore& store = s.model->store();
  const size_t i = size_t(store.table().index_of("h.0.mlp.fc.weight"));
  std::vector<float> v(size_t(store.table().specs[i].numel()), 0.5f);
  v[3] = -std::numeric_limits<float>::max();
  store.set(i, v.data());
  std::vector<float> back(v.size());
  store.get(i, back.data());
  EXPECT_EQ(back[3], v[3]);  // the row's absmax encodes to exactly -rho x scale
}

}  // namespace
