// SL_INVARIANT: a failed "cannot happen" check aborts where tests run without NDEBUG (the ASan
// pass), and in the build we ship is logged once per check, counted, and survived.
#include "common/invariant.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/log.h"
#include "metrics/metrics.h"

namespace sidelock {
namespace {

TEST(InvariantTest, AHoldingInvariantYieldsTrueAndCountsNothing) {
  const uint64_t before = internalErrorCount();
  int evaluations = 0;
  EXPECT_TRUE(SL_INVARIANT(++evaluations == 1, "test.holds"));
  EXPECT_EQ(evaluations, 1) << "the condition is evaluated exactly once";
  EXPECT_EQ(internalErrorCount(), before);
}

#ifdef NDEBUG

/// Everything logged while `fn` runs.
template <typename Fn>
std::string logOf(Fn fn) {
  FILE* out = std::tmpfile();
  configureLogging(LogLevel::kInfo, LogFormat::kLogfmt, out);
  fn();
  configureLogging(LogLevel::kInfo, LogFormat::kLogfmt, stderr);
  std::string text(4096, '\0');
  std::rewind(out);
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  return text;
}

TEST(InvariantTest, ABrokenInvariantIsSurvivedLoggedOnceAndCounted) {
  const uint64_t before = internalErrorCount();
  bool recovered = false;
  const std::string first = logOf([&] {
    if (!SL_INVARIANT(1 + 1 == 3, "test.broken")) recovered = true;
  });
  EXPECT_TRUE(recovered) << "the recovery branch runs";
  EXPECT_NE(first.find("internal.invariant_failed"), std::string::npos) << first;
  EXPECT_NE(first.find("test.broken"), std::string::npos) << first;
  EXPECT_NE(first.find("1 + 1 == 3"), std::string::npos) << "the log names the condition";
  const std::string repeat = logOf([] { (void)SL_INVARIANT(false, "test.broken"); });
  EXPECT_EQ(repeat, "") << "a repeat of the same check is counted, not logged";
  EXPECT_EQ(internalErrorCount(), before + 2);
}

TEST(InvariantTest, MetricsExportTheCountAtScrapeTime) {
  metrics::Metrics m;
  (void)SL_INVARIANT(false, "test.scraped");
  const std::string text = m.render();
  const std::string line =
      "sidelock_internal_errors_total " + std::to_string(internalErrorCount());
  EXPECT_NE(text.find(line), std::string::npos) << text.substr(0, 2000);
}

#else

TEST(InvariantDeathTest, ABrokenInvariantAbortsWhereTestsRunWithoutNdebug) {
  EXPECT_DEATH((void)SL_INVARIANT(1 + 1 == 3, "test.broken"), "invariant test.broken failed: 1 \\+ 1 == 3");
}

#endif

}  // namespace
}  // namespace sidelock
