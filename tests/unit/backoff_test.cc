#include "lock/backoff.h"

#include <gtest/gtest.h>

namespace sidelock::lock {
namespace {

int64_t lowest(int64_t lo, int64_t) { return lo; }
int64_t highest(int64_t, int64_t hi) { return hi; }

TEST(BackoffTest, CeilingDoublesFromMinAndStopsAtMax) {
  EXPECT_EQ(backoffCeilingMs(0, 2, 500), 2);
  EXPECT_EQ(backoffCeilingMs(1, 2, 500), 4);
  EXPECT_EQ(backoffCeilingMs(4, 2, 500), 32);
  EXPECT_EQ(backoffCeilingMs(8, 2, 500), 500);
  EXPECT_EQ(backoffCeilingMs(1'000'000, 2, 500), 500);  // no overflow however long we wait
}

TEST(BackoffTest, CeilingIsNeverZeroAndMaxBelowMinMeansMin) {
  EXPECT_EQ(backoffCeilingMs(0, 0, 0), 1);
  EXPECT_EQ(backoffCeilingMs(3, 0, 100), 8);
  EXPECT_EQ(backoffCeilingMs(3, 50, 10), 50);
}

TEST(BackoffTest, ClipNeverSleepsPastHolderTtlOrDeadline) {
  EXPECT_EQ(clipDelayMs(400, -1, -1), 400);
  EXPECT_EQ(clipDelayMs(400, 99, -1), 100);  // just after the holder's PTTL
  EXPECT_EQ(clipDelayMs(400, -1, 30), 30);
  EXPECT_EQ(clipDelayMs(400, 99, 30), 30);
  EXPECT_EQ(clipDelayMs(400, 0, -1), 1);
  EXPECT_EQ(clipDelayMs(400, -1, 0), 1);  // never a zero sleep: no spinning
}

TEST(BackoffTest, ExtraJitterSpreadsRetriesAndStillRespectsTheClip) {
  Backoff lo(2, 500, &lowest, 50);
  Backoff hi(2, 500, &highest, 50);
  EXPECT_EQ(lo.next(), 1);       // [ceiling/2 .. ceiling] + [0 .. 50]
  EXPECT_EQ(hi.next(), 2 + 50);
  EXPECT_EQ(hi.next(10, -1), 11);  // never past the holder's TTL, jitter or not
  Backoff real(2, 500, nullptr, 50);
  for (int i = 0; i < 100; ++i) {
    real.reset();
    int64_t d = real.next();
    EXPECT_GE(d, 1);
    EXPECT_LE(d, 52);
  }
}

TEST(BackoffTest, JitterStaysWithinHalfToFullCeiling) {
  Backoff lo(2, 500, &lowest);
  Backoff hi(2, 500, &highest);
  const int64_t expect_hi[] = {2, 4, 8, 16, 32, 64, 128, 256, 500, 500};
  const int64_t expect_lo[] = {1, 2, 4, 8, 16, 32, 64, 128, 250, 250};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(hi.next(), expect_hi[i]) << i;
    EXPECT_EQ(lo.next(), expect_lo[i]) << i;
  }
  Backoff real(2, 500);  // the default jitter source
  for (int i = 0; i < 200; ++i) {
    const int64_t ceiling = backoffCeilingMs(real.attempt(), 2, 500);
    const int64_t d = real.next();
    EXPECT_GE(d, std::max<int64_t>(1, ceiling / 2));
    EXPECT_LE(d, ceiling);
  }
}

TEST(BackoffTest, ResetStartsOverAndBoundsApply) {
  Backoff b(10, 1000, &highest);
  b.next();
  b.next();
  EXPECT_EQ(b.next(), 40);
  b.reset();
  EXPECT_EQ(b.attempt(), 0);
  EXPECT_EQ(b.next(), 10);
  EXPECT_EQ(b.next(-1, 5), 5);    // deadline
  EXPECT_EQ(b.next(12, -1), 13);  // holder TTL
}

}  // namespace
}  // namespace sidelock::lock
