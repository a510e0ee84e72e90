// The per-step time split's accounting (model/step_split.h): phase intervals, sample weights,
// and which decode passes the sampler times.
#include "model/step_split.h"

#include <gtest/gtest.h>

#include <vector>

namespace ft {
namespace {

TEST(StepSplit, IntervalsGoToThePhaseThatStartsThem) {
  using P = StepPhase;
  // other | attention 2 | routing 1 | fetch 3 | hits 4 | attention 5 | other (end)
  const std::vector<P> marks = {P::OTHER, P::ATTENTION, P::ROUTING, P::FETCH,
                                P::HITS,  P::ATTENTION, P::OTHER};
  const std::vector<double> s = {0.5, 2, 1, 3, 4, 5};
  StepSplit split;
  add_step_split(marks, s, 1.0, split);
  EXPECT_DOUBLE_EQ(split.attention, 7);
  EXPECT_DOUBLE_EQ(split.routing, 1);
  EXPECT_DOUBLE_EQ(split.fetch, 3);
  EXPECT_DOUBLE_EQ(split.hits, 4);
  EXPECT_DOUBLE_EQ(split.other, 0.5);
  // A sampled pass stands for `weight` passes; totals accumulate.
  add_step_split(marks, s, 32.0, split);
  EXPECT_DOUBLE_EQ(split.attention, 7 + 32 * 7);
  EXPECT_DOUBLE_EQ(split.hits, 4 + 32 * 4);
}

TEST(StepSplit, NoIntervalsWithoutTwoMarks) {
  StepSplit split;
  const std::vector<StepPhase> one = {StepPhase::ATTENTION};
  add_step_split(one, std::vector<double>{}, 1.0, split);
  EXPECT_EQ(split.attention, 0);
}

TEST(StepSampler, TimesTheFirstThenEveryNth) {
  StepSampler s(4);
  std::vector<int> timed;
  for (int i = 0; i < 12; ++i)
    if (s.next()) timed.push_back(i);
  EXPECT_EQ(timed, (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(s.weight(), 4);
  s.set_every(0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.next());
  s.set_every(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.next());
}

}  // namespace
}  // namespace ft
