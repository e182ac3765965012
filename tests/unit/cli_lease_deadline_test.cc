// The kill deadline of `sidelock run` (cli/lease_deadline.h): CMD's group is dead before the lease
// could have expired, counted from the last renewal received, whatever the grace.
#include <gtest/gtest.h>

#include "cli/lease_deadline.h"

namespace sidelock::cli {
namespace {

TEST(LeaseDeadlineTest, NothingIsScheduledUntilATtlIsKnown) {
  LeaseDeadline d(10'000);
  EXPECT_FALSE(d.known());
  EXPECT_EQ(d.killBy(), -1);
  EXPECT_EQ(d.overdueAt(), -1);
  EXPECT_EQ(d.sigkillAt(500), 10'500);  // only the grace
  d.confirmed(100, -1);                 // a grant without a TTL changes nothing
  EXPECT_FALSE(d.known());
}

TEST(LeaseDeadlineTest, SafetyMarginIsATenthOfTheTtlAtMostOneSecond) {
  EXPECT_EQ(LeaseDeadline::safetyMarginMs(2'000), 200);
  EXPECT_EQ(LeaseDeadline::safetyMarginMs(10'000), 1'000);
  EXPECT_EQ(LeaseDeadline::safetyMarginMs(60'000), 1'000);
  EXPECT_EQ(LeaseDeadline::safetyMarginMs(5), 0);
}

TEST(LeaseDeadlineTest, CountsFromTheLastRenewalReceived) {
  LeaseDeadline d(1'000);
  d.confirmed(1'000, 10'000);
  EXPECT_EQ(d.expiresAt(), 11'000);
  EXPECT_EQ(d.killBy(), 10'000);  // 11 s - the 1 s margin
  d.confirmed(4'000, 9'990);      // a renewal saying what is left
  EXPECT_EQ(d.expiresAt(), 13'990);
  EXPECT_EQ(d.killBy(), 12'991);  // margin of 999
}

TEST(LeaseDeadlineTest, AGraceThatWouldPassTheDeadlineIsCut) {
  // The consul-lock failure: a loss noticed late plus a long grace would SIGKILL after the expiry.
  LeaseDeadline d(30'000);
  d.confirmed(0, 10'000);
  EXPECT_EQ(d.sigkillAt(2'000), 9'000);  // a loss noticed early: cut to the deadline
  EXPECT_EQ(d.sigkillAt(9'500), 9'000);  // noticed after it: at once
  LeaseDeadline short_grace(500);
  short_grace.confirmed(0, 10'000);
  EXPECT_EQ(short_grace.sigkillAt(2'000), 2'500);  // the whole grace fits
}

TEST(LeaseDeadlineTest, OverdueLeavesTheGraceWhenItFitsAndNeverPassesTheDeadline) {
  // Long grace: SIGTERM after half a TTL without a renewal; the SIGKILL then comes at the deadline.
  LeaseDeadline d(10'000);
  d.confirmed(0, 10'000);
  EXPECT_EQ(d.overdueAt(), 5'000);
  EXPECT_EQ(d.sigkillAt(d.overdueAt()), 9'000);
  // Short grace: a late renewal gets until only the grace is left.
  LeaseDeadline s(2'000);
  s.confirmed(0, 30'000);
  EXPECT_EQ(s.killBy(), 29'000);
  EXPECT_EQ(s.overdueAt(), 27'000);
  EXPECT_EQ(s.sigkillAt(s.overdueAt()), 29'000);
  // No grace at all: straight to the deadline.
  LeaseDeadline z(0);
  z.confirmed(0, 1'000);
  EXPECT_EQ(z.overdueAt(), z.killBy());
  EXPECT_EQ(z.killBy(), 900);
}

// --elect and the sidecar's step-down: CMD is dead before the sidecar resigns, less a margin.
TEST(LeaseDeadlineTest, AStepDownBringsTheSigkillBeforeTheResignation) {
  // resign_in_ms 5000 at t=1000: by 6000 less a margin of 500.
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 11'000, 5'000), 5'500);
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 3'000, 5'000), 3'000) << "earlier stays";
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 11'000, 0), 1'000) << "never in the past";
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 11'000, -1), 11'000) << "no resign_in_ms";
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, -1, 5'000), -1) << "no SIGKILL pending";
}

}  // namespace
}  // namespace sidelock::cli
