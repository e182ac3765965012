// `sidelock locks`: argument parsing and the table (pure logic; the command itself is tested end
// to end in tests/integration/cli_locks_test.cc).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/locks_command.h"

namespace sidelock::cli {
namespace {

RunEnvironment env(std::map<std::string, std::string> vars = {}) {
  RunEnvironment e;
  e.getenv = [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  e.socket_exists = [](const std::string&) { return false; };
  return e;
}

TEST(LocksOptionsTest, FlagsEnvironmentAndDefaults) {
  auto o = parseLocksArgs({}, env());
  ASSERT_TRUE(o.isOk());
  EXPECT_EQ(o->endpoint.describe(), kDefaultAddr);
  EXPECT_FALSE(o->json);
  o = parseLocksArgs({"--json", "--socket=/tmp/s.sock"}, env({{"SIDELOCK_AUTH_TOKEN", "t0k"}}));
  ASSERT_TRUE(o.isOk());
  EXPECT_TRUE(o->json);
  EXPECT_EQ(o->endpoint.describe(), "unix:/tmp/s.sock");
  EXPECT_EQ(o->token, "t0k");
  o = parseLocksArgs({}, env({{"SIDELOCK_ADDR", "[::1]:7411"}}));
  ASSERT_TRUE(o.isOk());
  EXPECT_EQ(o->endpoint.describe(), "[::1]:7411");
  EXPECT_TRUE(parseLocksArgs({"--help"}, env())->help);
  EXPECT_FALSE(parseLocksArgs({"--addr"}, env()).isOk());
  EXPECT_FALSE(parseLocksArgs({"--addr", "nope"}, env()).isOk());
  EXPECT_FALSE(parseLocksArgs({"--socket", "/a", "--addr", "h:1"}, env()).isOk());
  EXPECT_FALSE(parseLocksArgs({"orders-42"}, env()).isOk());
}

TEST(LocksTableTest, OneRowPerNameSortedWithWaitersAndASummary) {
  const auto list = nlohmann::json::parse(R"({
    "leases": [
      {"name": "orders-42", "token": 17, "age_ms": 2500, "ttl_remaining_ms": 7500,
       "auto_renew": true, "stream": false},
      {"name": "jobs:7", "token": 3, "age_ms": 125000, "ttl_remaining_ms": 850,
       "auto_renew": true, "stream": true}
    ],
    "waiters": [{"name": "orders-42", "waiters": 2}, {"name": "billing", "waiters": 1}]
  })");
  auto table = formatLocksTable(list);
  ASSERT_TRUE(table.isOk()) << table.status().toString();
  EXPECT_EQ(*table,
            "LOCK       HELD  TOKEN  AGE    TTL LEFT  RENEWAL  WAITERS\n"
            "billing    no    -      -      -         -        1\n"
            "jobs:7     yes   3      2m05s  850ms     stream   0\n"
            "orders-42  yes   17     2.5s   7.5s      auto     2\n"
            "2 leases held, 3 waiters queued (this sidecar only; owner ids are never shown)\n");
}

TEST(LocksTableTest, EmptyAndMalformedAnswers) {
  auto empty = formatLocksTable(nlohmann::json::parse(R"({"leases":[],"waiters":[]})"));
  ASSERT_TRUE(empty.isOk());
  EXPECT_EQ(*empty, "no leases held and no waiters queued in this sidecar\n");
  for (const char* bad : {R"([])", R"({"leases":[]})", R"({"leases":[{"name":1}],"waiters":[]})",
                          R"({"leases":[],"waiters":[{"name":"x","waiters":-1}]})"}) {
    auto r = formatLocksTable(nlohmann::json::parse(bad));
    EXPECT_FALSE(r.isOk()) << bad;
  }
}

}  // namespace
}  // namespace sidelock::cli
