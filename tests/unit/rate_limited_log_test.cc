// RateLimitedLog on a fake clock (plain integers): which occurrences are logged, and the counts
// the logged lines carry.
#include "common/rate_limited_log.h"

#include <gtest/gtest.h>

namespace sidelock {
namespace {

TEST(RateLimitedLogTest, FirstOccurrenceIsLoggedThenRepeatsAreCountedUntilTheWindowEnds) {
  RateLimitedLog log(10'000);
  int64_t now = 5'000;
  EXPECT_EQ(log.admit(now, "no_quorum"), 0u);
  for (int i = 0; i < 99; ++i) {
    now += 100;  // one request every 100 ms
    EXPECT_EQ(log.admit(now, "no_quorum"), std::nullopt) << "at " << now;
  }
  EXPECT_EQ(log.suppressed(), 99u);
  now = 5'000 + 10'000;  // one window after the logged line
  EXPECT_EQ(log.admit(now, "no_quorum"), 99u) << "the held-back count rides on the next line";
  EXPECT_EQ(log.suppressed(), 0u);
  EXPECT_EQ(log.admit(now + 1, "no_quorum"), std::nullopt);
}

TEST(RateLimitedLogTest, AChangeOfStateIsLoggedAtOnce) {
  RateLimitedLog log(10'000);
  EXPECT_EQ(log.admit(0, "node 2 down"), 0u);
  EXPECT_EQ(log.admit(10, "node 2 down"), std::nullopt);
  EXPECT_EQ(log.admit(20, "nodes 2,3 down"), 1u);
  EXPECT_EQ(log.admit(30, "nodes 2,3 down"), std::nullopt);
  EXPECT_EQ(log.admit(40, "node 2 down"), 1u) << "going back is a change too";
}

TEST(RateLimitedLogTest, ResetLogsTheNextOccurrenceAtOnceWithWhatWasHeldBack) {
  RateLimitedLog log(10'000);
  EXPECT_EQ(log.admit(0, "down"), 0u);
  EXPECT_EQ(log.admit(1, "down"), std::nullopt);
  log.reset();  // the outage ended
  EXPECT_EQ(log.admit(2, "down"), 1u);
}

TEST(RateLimitedLogTest, QuietPeriodsLogEveryOccurrence) {
  RateLimitedLog log(10'000);
  for (int64_t t = 0; t < 100'000; t += 10'000) EXPECT_EQ(log.admit(t, "x"), 0u) << t;
}

}  // namespace
}  // namespace sidelock
