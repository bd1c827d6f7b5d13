#include "worker/job_runner.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(LearningRateScaleTest, Constant) {
  v1::LearningRateSchedule s;
  EXPECT_EQ(LearningRateScale(s, 0, 10, 100), 1.0f);
  EXPECT_EQ(LearningRateScale(s, 99, 10, 100), 1.0f);
}

TEST(LearningRateScaleTest, StepDecaysEveryStepEpochs) {
  v1::LearningRateSchedule s;
  s.set_kind(v1::LearningRateSchedule::STEP);
  s.set_gamma(0.5f);
  s.set_step_epochs(2);
  // 10 clocks per epoch: epochs 1-2 at 1, 3-4 at 0.5, 5 at 0.25.
  EXPECT_FLOAT_EQ(LearningRateScale(s, 0, 10, 50), 1.0f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 19, 10, 50), 1.0f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 20, 10, 50), 0.5f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 40, 10, 50), 0.25f);
  s.clear_gamma();        // default 0.1
  s.clear_step_epochs();  // default 1
  EXPECT_FLOAT_EQ(LearningRateScale(s, 10, 10, 50), 0.1f);
}

TEST(LearningRateScaleTest, CosineGoesFromOneToFinalFraction) {
  v1::LearningRateSchedule s;
  s.set_kind(v1::LearningRateSchedule::COSINE);
  s.set_final_fraction(0.2f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 0, 10, 100), 1.0f);
  EXPECT_NEAR(LearningRateScale(s, 50, 10, 100), 0.6f, 1e-6);
  EXPECT_NEAR(LearningRateScale(s, 100, 10, 100), 0.2f, 1e-6);
}

}  // namespace
}  // namespace ps
