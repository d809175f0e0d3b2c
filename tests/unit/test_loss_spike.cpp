// The loss-spike detector (train.spike_factor / spike_window): a jump or a slow climb to several
// times the lowest running median is a spike; noise, a falling loss and the first step are not.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/loss_spike.h"

using eco::LossSpikeDetector;

TEST(LossSpike, AJumpAtTheSecondStepIsASpike) {
  LossSpikeDetector d(4.0, 20);
  EXPECT_FALSE(d.add(4.16));  // a run's first loss is never a spike
  const auto spike = d.add(2810.0);
  ASSERT_TRUE(spike);
  EXPECT_NE(spike->find("train.spike_factor 4"), std::string::npos) << *spike;
}

TEST(LossSpike, ASlowClimbIsCaughtOnceItPassesFactorTimesTheLowestMedian) {
  LossSpikeDetector d(4.0, 5);
  for (int i = 0; i < 10; ++i) ASSERT_FALSE(d.add(2.0));
  // 10% a step: the window's median follows the climb, the lowest median stays at 2.
  double loss = 2.0;
  int steps = 0;
  while (!d.add(loss *= 1.1)) ASSERT_LT(++steps, 100);
  EXPECT_GT(loss, 8.0);
  EXPECT_LT(loss, 8.0 * 1.1 + 1e-9);
}

TEST(LossSpike, AFallingNoisyLossIsNeverASpike) {
  LossSpikeDetector d(4.0, 20);
  for (int i = 0; i < 2000; ++i) {
    const double loss = 4.0 * std::exp(-i / 300.0) + 1.2 + 0.3 * std::sin(i * 1.7);
    ASSERT_FALSE(d.add(loss)) << "step " << i;
  }
}

TEST(LossSpike, NoiseAtALowLossIsNoSpike) {
  // 0.02 -> 0.2 is 10x, but less than one nat: memorisation noise, not divergence.
  LossSpikeDetector d(4.0, 5);
  for (int i = 0; i < 10; ++i) ASSERT_FALSE(d.add(0.02));
  EXPECT_FALSE(d.add(0.2));
}

TEST(LossSpike, FactorZeroTurnsTheDetectorOff) {
  LossSpikeDetector d(0.0, 5);
  EXPECT_FALSE(d.add(4.0));
  EXPECT_FALSE(d.add(1e13));
}

TEST(LossSpike, ARestoredDetectorJudgesAsTheOneItWasSavedFrom) {
  // A resumed run's detector continues from the checkpoint's state: the same verdicts on the
  // same losses, the first loss after the resume included.
  LossSpikeDetector whole(4.0, 5), first(4.0, 5);
  const double losses[] = {5.5, 5.1, 4.8, 4.9, 4.4, 4.6, 4.1, 25.0, 3.9, 3.8};
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(whole.add(losses[i]));
    ASSERT_FALSE(first.add(losses[i]));
  }
  LossSpikeDetector resumed(4.0, 5);
  resumed.restore(first.state());
  for (int i = 4; i < 10; ++i)
    EXPECT_EQ(bool(whole.add(losses[i])), bool(resumed.add(losses[i]))) << "loss " << i;
  EXPECT_EQ(whole.state().recent, resumed.state().recent);
  EXPECT_EQ(whole.state().lowest_median, resumed.state().lowest_median);
}

TEST(LossSpike, TheFirstLossAfterARestoreIsJudged) {
  LossSpikeDetector d(4.0, 20);
  ASSERT_FALSE(d.add(5.564));
  LossSpikeDetector resumed(4.0, 20);
  EXPECT_FALSE(resumed.add(890.0));  // a fresh detector takes any first loss
  resumed = LossSpikeDetector(4.0, 20);
  resumed.restore(d.state());
  EXPECT_TRUE(resumed.add(890.0));
}

TEST(LossSpike, ARestoreIntoASmallerWindowKeepsTheNewestLosses) {
  LossSpikeDetector d(4.0, 6);
  for (double loss : {6.0, 5.0, 4.0, 3.0, 2.0, 1.0}) ASSERT_FALSE(d.add(loss));
  LossSpikeDetector smaller(4.0, 3);
  smaller.restore(d.state());
  EXPECT_EQ(smaller.state().recent, (std::vector<double>{3.0, 2.0, 1.0}));
  EXPECT_EQ(smaller.state().lowest_median, d.state().lowest_median);
}
