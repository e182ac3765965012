#include "common/log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sidelock {
namespace {

TEST(LogTest, LogfmtQuotesOnlyWhenNeeded) {
  std::string line = formatLogLine(LogFormat::kLogfmt, LogLevel::kInfo, "lock.granted",
                                   {{"name", "orders-42"}, {"note", "two words"}, {"token", 7}});
  EXPECT_NE(line.find(" level=info event=lock.granted name=orders-42 note=\"two words\" token=7"),
            std::string::npos)
      << line;
}

TEST(LogTest, JsonLineParsesAndEscapesControlBytes) {
  std::string line = formatLogLine(LogFormat::kJson, LogLevel::kWarn, "backend.down",
                                   {{"reason", std::string("a\nb\x01", 4)}});
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["event"], "backend.down");
  EXPECT_EQ(j["reason"], std::string("a\nb\x01", 4));
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(LogTest, OwnerDigestIsStableAndHidesOwner) {
  std::string d = ownerDigest("secret-owner-id");
  EXPECT_EQ(d, ownerDigest("secret-owner-id"));
  EXPECT_NE(d, ownerDigest("secret-owner-iD"));
  EXPECT_EQ(d.find("secret"), std::string::npos);
}

TEST(LogTest, ParseLevelAndFormat) {
  EXPECT_EQ(*parseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_FALSE(parseLogLevel("verbose").isOk());
  EXPECT_EQ(*parseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(parseLogFormat("xml").isOk());
}

}  // namespace
}  // namespace sidelock
