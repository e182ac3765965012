// The admin listing of held locks (issue 20, "Operators"): GET /admin/v1/locks?prefix=&limit= on
// any sidecar's admin listener lists the locks held anywhere in the deployment (SCAN of the
// holder records on every master, then an inspect of each), sorted by name, bounded by limit,
// never an owner id; `sidelock locks --all` prints it. Real redis-server processes (one master,
// a three-master cluster, a Redlock set) and real sidecar processes.
#include <gtest/gtest.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"
#include "support/sidelock_cli.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

struct Pair {
  std::unique_ptr<SidecarProcess> a;  // grants the locks
  std::unique_ptr<SidecarProcess> b;  // lists them on its admin listener
  int admin = 0;
};

Pair startPair(const std::string& yaml) {
  Pair p;
  p.admin = pickFreePort();
  p.a = std::make_unique<SidecarProcess>(SidecarProcess::Options{yaml, {}, true});
  p.b = std::make_unique<SidecarProcess>(SidecarProcess::Options{
      yaml, {}, true, "  admin: \"127.0.0.1:" + std::to_string(p.admin) + "\"\n"});
  return p;
}

/// Acquires each name on `c` with the holder "holder of <name>"; returns the owner ids.
std::vector<std::string> acquireAll(HttpClient& c, const std::vector<std::string>& names) {
  std::vector<std::string> owners;
  for (const std::string& n : names) {
    auto r = c.post("/v1/locks/" + n + "/acquire",
                    json{{"ttl_ms", 30000}, {"holder", "holder of " + n}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    owners.push_back(json::parse(r.body).value("owner", ""));
  }
  return owners;
}

std::vector<std::string> listedNames(const json& listing) {
  std::vector<std::string> names;
  for (const auto& l : listing["locks"]) names.push_back(l["name"]);
  return names;
}

json list(int admin, const std::string& query, int expect_status = 200) {
  HttpClient c = HttpClient::tcp(admin);
  auto r = c.get("/admin/v1/locks" + query);
  EXPECT_EQ(r.status, expect_status) << query << ": " << r.body;
  return json::parse(r.body, nullptr, false);
}

CliResult locksCli(const std::string& args) { return runSidelockCli("locks", args); }

TEST(AdminListingTest, ListsLocksHeldThroughAnotherSidecarSortedBoundedAndWithoutOwnerIds) {
  RedisServer redis;
  Pair p = startPair(redisBackendYaml(redis.address()));
  HttpClient ca = HttpClient::tcp(p.a->port());
  const std::vector<std::string> owners =
      acquireAll(ca, {"orders-2", "orders-1", "orders-3", "billing"});

  const json all = list(p.admin, "");
  EXPECT_EQ(listedNames(all),
            (std::vector<std::string>{"billing", "orders-1", "orders-2", "orders-3"}));
  EXPECT_EQ(all["truncated"], false);
  const json& first = all["locks"][1];
  EXPECT_EQ(first["holder"], "holder of orders-1");
  EXPECT_GT(first["ttl_ms"].get<int64_t>(), 20000);
  EXPECT_GT(first["since_ms"].get<int64_t>(), 0);
  EXPECT_GT(first["token"].get<uint64_t>(), 0u);
  for (const std::string& owner : owners) {
    EXPECT_EQ(all.dump().find(owner), std::string::npos) << "never the owner id";
  }

  EXPECT_EQ(listedNames(list(p.admin, "?prefix=orders-")),
            (std::vector<std::string>{"orders-1", "orders-2", "orders-3"}));
  const json cut = list(p.admin, "?prefix=orders-&limit=2");
  EXPECT_EQ(listedNames(cut), (std::vector<std::string>{"orders-1", "orders-2"}));
  EXPECT_EQ(cut["truncated"], true);
  EXPECT_NE(cut["truncated_reason"].get<std::string>().find("more than 2"), std::string::npos);

  // Released: gone from the listing at once (its record goes with the lease).
  auto released = ca.post("/v1/locks/orders-2/release", json{{"owner", owners[0]}}.dump());
  EXPECT_EQ(released.status, 200) << released.body;
  EXPECT_EQ(listedNames(list(p.admin, "?prefix=orders-")),
            (std::vector<std::string>{"orders-1", "orders-3"}));
  // A record without its lease (left behind, or written by hand) is not a held lock.
  redis.cli({"SET", "sidelock:{orders-9}:holder", "nobody 1 ghost"});
  EXPECT_EQ(listedNames(list(p.admin, "?prefix=orders-")),
            (std::vector<std::string>{"orders-1", "orders-3"}));

  // Bad input: 400 JSON naming the problem.
  for (const char* bad : {"?limit=0", "?limit=1001", "?limit=x", "?prefix=a*", "?prefix=a%7Bb",
                          "?prefix=%zz", "?color=red", "?limit=1&limit=2", "?prefix=a&prefix=b"}) {
    const json e = list(p.admin, bad, 400);
    EXPECT_EQ(e.value("error", ""), "bad_request") << bad;
  }
  // Not on the lock listener.
  EXPECT_EQ(ca.get("/admin/v1/locks").status, 404);

  // The CLI prints it as a table.
  const std::string addr = "--addr 127.0.0.1:" + std::to_string(p.admin);
  CliResult table = locksCli("--all " + addr);
  EXPECT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("LOCK"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("holder of orders-3"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("3 locks held across the deployment"), std::string::npos) << table.out;
  CliResult limited = locksCli("--all --prefix orders- --limit 1 " + addr);
  EXPECT_EQ(limited.exit_code, 0) << limited.out;
  EXPECT_NE(limited.out.find("orders-1"), std::string::npos) << limited.out;
  EXPECT_EQ(limited.out.find("orders-3"), std::string::npos) << limited.out;
  EXPECT_NE(limited.out.find("truncated: more than 1"), std::string::npos) << limited.out;
  CliResult as_json = locksCli("--all --json --prefix billing " + addr);
  EXPECT_EQ(as_json.exit_code, 0) << as_json.out;
  EXPECT_EQ(listedNames(json::parse(as_json.out)), std::vector<std::string>{"billing"});
  EXPECT_EQ(locksCli("--all --limit 0 " + addr).exit_code, 64);
  EXPECT_EQ(locksCli("--prefix x " + addr).exit_code, 64);
  EXPECT_NE(locksCli("--help").out.find("--all"), std::string::npos);

  EXPECT_EQ(p.a->stop(), 0) << p.a->logs();
  EXPECT_EQ(p.b->stop(), 0) << p.b->logs();
}

TEST(AdminListingTest, ClusterIsScannedOnEveryMaster) {
  RedisCluster cluster(3);
  const std::string yaml = "backend:\n  type: cluster\n  nodes: [\"" + cluster.address(0) +
                           "\"]\n  command_timeout_ms: 3000\n";
  Pair p = startPair(yaml);
  HttpClient ca = HttpClient::tcp(p.a->port());
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("job-" + std::to_string(10 + i));
  acquireAll(ca, names);
  const json all = list(p.admin, "?prefix=job-");
  EXPECT_EQ(listedNames(all), names) << all.dump();  // 12 names spread over the 3 masters
  EXPECT_EQ(all["truncated"], false);
  EXPECT_EQ(p.a->stop(), 0) << p.a->logs();
  EXPECT_EQ(p.b->stop(), 0) << p.b->logs();
}

TEST(AdminListingTest, RedlockListsALockWhoseHolderAMajorityRecords) {
  RedisServer r1, r2, r3;
  Pair p = startPair(redlockBackendYaml({r1.address(), r2.address(), r3.address()}));
  HttpClient ca = HttpClient::tcp(p.a->port());
  acquireAll(ca, {"rl-a", "rl-b"});
  EXPECT_EQ(listedNames(list(p.admin, "")), (std::vector<std::string>{"rl-a", "rl-b"}));
  // One node's record gone: found on the others, and the majority still names the holder.
  r1.cli({"DEL", "sidelock:{rl-a}:holder"});
  EXPECT_EQ(listedNames(list(p.admin, "")), (std::vector<std::string>{"rl-a", "rl-b"}));
  // Two gone: no majority agrees who holds it, so it is not listed.
  r2.cli({"DEL", "sidelock:{rl-a}:holder"});
  EXPECT_EQ(listedNames(list(p.admin, "")), std::vector<std::string>{"rl-b"});
  EXPECT_EQ(p.a->stop(), 0) << p.a->logs();
  EXPECT_EQ(p.b->stop(), 0) << p.b->logs();
}

TEST(AdminListingTest, MemoryBackendListsItsOwnLeases) {
  const int admin = pickFreePort();
  SidecarProcess s(SidecarProcess::Options{
      "backend:\n  type: memory\n", {}, true, "  admin: \"127.0.0.1:" + std::to_string(admin) + "\"\n"});
  HttpClient c = HttpClient::tcp(s.port());
  acquireAll(c, {"m2", "m1"});
  const json all = list(admin, "?prefix=m");
  EXPECT_EQ(listedNames(all), (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(all["locks"][0]["holder"], "holder of m1");
  EXPECT_EQ(s.stop(), 0) << s.logs();
}

}  // namespace
}  // namespace sidelock::testing
