// podIdentity(): who this pod is, for config `identity` and `sidelock run --elect`'s candidate.
#include "common/pod_identity.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace sidelock {
namespace {

EnvLookup fakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(PodIdentityTest, PodNameElseHostNameElseNothing) {
  const auto host = [] { return std::string("node-1"); };
  EXPECT_EQ(podIdentity(fakeEnv({{"POD_NAME", "web-0"}}), host), "web-0");
  EXPECT_EQ(podIdentity(fakeEnv({}), host), "node-1");
  // An empty $POD_NAME is unset (a lookup that reports it as set must not name the pod "").
  EXPECT_EQ(podIdentity(fakeEnv({{"POD_NAME", ""}}), host), "node-1");
  EXPECT_EQ(podIdentity(fakeEnv({}), [] { return std::string(); }), "");
  EXPECT_EQ(podIdentity(fakeEnv({}), nullptr), "") << "no host name known";
  EXPECT_EQ(podIdentity(fakeEnv({{"POD_NAME", "web-0"}}), nullptr), "web-0");
}

TEST(PodIdentityTest, SystemLookupsReadTheProcess) {
  ::setenv("SIDELOCK_TEST_EMPTY", "", 1);
  ::setenv("SIDELOCK_TEST_SET", "x", 1);
  EXPECT_EQ(systemGetenv("SIDELOCK_TEST_EMPTY"), std::nullopt);
  EXPECT_EQ(systemGetenv("SIDELOCK_TEST_SET"), "x");
  EXPECT_EQ(systemGetenv("SIDELOCK_TEST_NEVER_SET"), std::nullopt);
  EXPECT_FALSE(systemHostName().empty()) << "a test machine has a host name";
}

}  // namespace
}  // namespace sidelock
