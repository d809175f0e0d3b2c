// eco::rel_err (src/core/rel_err.h), the comparison of the GPU and emulator tests and the benches:
// its value against a hand computation, and that nothing non-finite or missing can pass a
// tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rel_err.h"

namespace eco {
namespace {

TEST(RelErr, IsTheNormOfTheDifferenceOverTheNormOfTheReference) {
  // ||(3, 4) - (0, 0)|| / ||(3, 4)|| with a = b + (0.3, -0.4): 0.5 / 5.
  EXPECT_DOUBLE_EQ(rel_err({3.3f, 3.6f}, {3.0f, 4.0f}),
                   std::sqrt((double(3.3f) - 3) * (double(3.3f) - 3) +
                             (double(3.6f) - 4) * (double(3.6f) - 4)) / 5.0);
  EXPECT_EQ(rel_err({1.0f, -2.0f}, {1.0f, -2.0f}), 0.0);
  EXPECT_EQ(rel_err({}, {}), 0.0);
  // A zero reference: the absolute norm.
  EXPECT_DOUBLE_EQ(rel_err({3.0f, 4.0f}, {0.0f, 0.0f}), 5.0);
}

TEST(RelErr, NothingNonFiniteOrMissingPassesATolerance) {
  EXPECT_EQ(rel_err({1.0f, NAN}, {1.0f, 1.0f}), INFINITY);
  EXPECT_EQ(rel_err({INFINITY, 1.0f}, {1.0f, 1.0f}), INFINITY);
  EXPECT_EQ(rel_err({-INFINITY}, {1.0f}), INFINITY);
  EXPECT_TRUE(std::isnan(rel_err({1.0f}, {})));  // no reference
  EXPECT_FALSE(rel_err({1.0f}, {}) < 1.0);
}

}  // namespace
}  // namespace eco
