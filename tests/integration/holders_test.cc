// Holders visible from every sidecar (issue 20): an acquire's "holder" (a public label, the
// sidecar's identity by default) is recorded with the lease in the backend, so GET
// /v1/locks/{name} on any sidecar and a 409 locked name who holds it and since when. The owner id
// never shows: not in an answer, a log line or /metrics. Real redis-server processes (one master,
// a Redlock set, a three-master cluster) and two real sidecar processes each.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

int64_t unixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<SidecarProcess> startSidecar(const std::string& backend_yaml,
                                             std::vector<std::string> env = {}) {
  return std::make_unique<SidecarProcess>(
      SidecarProcess::Options{backend_yaml, std::move(env), /*wait_ready=*/true});
}

/// A acquires `name` as `holder`; B (another sidecar on the same backend) sees it in GET and in
/// the 409 of its own acquire. Returns the owner id A handed out.
std::string expectHolderSeenFromB(HttpClient& ca, HttpClient& cb, const std::string& name,
                                  const std::string& holder) {
  const int64_t before = unixNowMs();
  auto granted = ca.post("/v1/locks/" + name + "/acquire",
                         json{{"ttl_ms", 20000}, {"holder", holder}}.dump());
  EXPECT_EQ(granted.status, 200) << granted.body;
  const std::string owner = json::parse(granted.body).value("owner", "");

  auto seen = cb.get("/v1/locks/" + name);
  EXPECT_EQ(seen.status, 200) << seen.body;
  const json state = json::parse(seen.body);
  EXPECT_EQ(state["held"], true) << seen.body;
  EXPECT_EQ(state["holder"], holder) << seen.body;
  EXPECT_EQ(state["mode"], "exclusive");
  EXPECT_EQ(state["token"], json::parse(granted.body)["token"]) << "the lease's token";
  EXPECT_GT(state["ttl_ms"].get<int64_t>(), 10000);
  // Redis TIME and this clock are the same machine's: the grant's since_ms lies in the window.
  EXPECT_GE(state["since_ms"].get<int64_t>(), before - 1000) << seen.body;
  EXPECT_LE(state["since_ms"].get<int64_t>(), unixNowMs() + 1000) << seen.body;
  EXPECT_EQ(seen.body.find(owner), std::string::npos) << "never the owner id";

  auto busy = cb.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":1000})");
  EXPECT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["holder"], holder) << busy.body;
  EXPECT_EQ(busy.body.find(owner), std::string::npos) << "never the owner id";
  return owner;
}

/// Readers of `name` and permits of semaphore `name` taken on A ("reader a", "permit a") and on B
/// (no label: B's identity, `b_identity`): GET on B lists each one's holder, with since_ms and
/// ttl_ms, never an owner or permit id; a released one leaves the list. Returns the ids handed out.
std::vector<std::string> expectReadersAndPermitsSeenFromB(HttpClient& ca, HttpClient& cb,
                                                          const std::string& name,
                                                          const std::string& b_identity) {
  std::vector<std::string> ids;
  const int64_t before = unixNowMs();
  auto ra = ca.post("/v1/locks/" + name + "/acquire",
                    R"({"ttl_ms":20000,"mode":"shared","holder":"reader a"})");
  EXPECT_EQ(ra.status, 200) << ra.body;
  auto rb = cb.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":10000,"mode":"shared"})");
  EXPECT_EQ(rb.status, 200) << rb.body;
  ids.push_back(json::parse(ra.body).value("owner", ""));
  ids.push_back(json::parse(rb.body).value("owner", ""));
  auto seen = cb.get("/v1/locks/" + name);
  EXPECT_EQ(seen.status, 200) << seen.body;
  json state = json::parse(seen.body);
  EXPECT_EQ(state["mode"], "shared") << seen.body;
  EXPECT_EQ(state["readers"], 2) << seen.body;
  EXPECT_FALSE(state.contains("holder")) << "no writer: " << seen.body;
  EXPECT_EQ(state["holders"].size(), 2u) << seen.body;
  if (state["holders"].size() == 2) {
    // Soonest expiry first: B's 10 s reader, then A's 20 s one.
    EXPECT_EQ(state["holders"][0]["holder"], b_identity) << seen.body;
    EXPECT_EQ(state["holders"][1]["holder"], "reader a") << seen.body;
    EXPECT_GT(state["holders"][1]["ttl_ms"].get<int64_t>(), 10000) << seen.body;
    EXPECT_LE(state["holders"][1]["ttl_ms"].get<int64_t>(), 20000) << seen.body;
    EXPECT_GE(state["holders"][1]["since_ms"].get<int64_t>(), before - 1000) << seen.body;
    EXPECT_LE(state["holders"][1]["since_ms"].get<int64_t>(), unixNowMs() + 1000) << seen.body;
  }
  EXPECT_EQ(cb.post("/v1/locks/" + name + "/release", json{{"owner", ids[1]}}.dump()).status, 200);
  state = json::parse(cb.get("/v1/locks/" + name).body);
  EXPECT_EQ(state["holders"].size(), 1u) << state.dump();
  if (state["holders"].size() == 1) {
    EXPECT_EQ(state["holders"][0]["holder"], "reader a");
  }

  auto pa = ca.post("/v1/semaphores/" + name + "/acquire",
                    R"({"limit":3,"ttl_ms":20000,"holder":"permit a"})");
  EXPECT_EQ(pa.status, 200) << pa.body;
  auto pb = cb.post("/v1/semaphores/" + name + "/acquire", R"({"limit":3,"ttl_ms":20000})");
  EXPECT_EQ(pb.status, 200) << pb.body;
  ids.push_back(json::parse(pa.body).value("permit", ""));
  ids.push_back(json::parse(pb.body).value("permit", ""));
  auto sem = cb.get("/v1/semaphores/" + name);
  EXPECT_EQ(sem.status, 200) << sem.body;
  const json permits = json::parse(sem.body);
  EXPECT_EQ(permits["used"], 2) << sem.body;
  std::vector<std::string> labels;
  for (const json& p : permits["holders"]) {
    labels.push_back(p["holder"]);
    EXPECT_GT(p["ttl_ms"].get<int64_t>(), 10000) << sem.body;
    EXPECT_GE(p["since_ms"].get<int64_t>(), before - 1000) << sem.body;
  }
  std::vector<std::string> expected = {b_identity, "permit a"};
  std::sort(labels.begin(), labels.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(labels, expected) << sem.body;
  EXPECT_EQ(ca.post("/v1/semaphores/" + name + "/release", json{{"permit", ids[2]}}.dump()).status,
            200);
  const json left = json::parse(cb.get("/v1/semaphores/" + name).body);
  EXPECT_EQ(left["holders"].size(), 1u) << left.dump();
  for (const std::string& id : ids) {
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(seen.body.find(id), std::string::npos) << "never an owner id";
    EXPECT_EQ(sem.body.find(id), std::string::npos) << "never a permit id";
  }
  return ids;
}

/// A multi-lock taken on A as "batch 9": B sees the holder on every name. Returns its owner id.
std::string expectMultiHolderSeenFromB(HttpClient& ca, HttpClient& cb, const std::string& x,
                                       const std::string& y) {
  auto granted = ca.post("/v1/multilocks/acquire",
                         json{{"names", json::array({x, y})}, {"ttl_ms", 20000}, {"holder", "batch 9"}}
                             .dump());
  EXPECT_EQ(granted.status, 200) << granted.body;
  const std::string owner = json::parse(granted.body).value("owner", "");
  for (const std::string& name : {x, y}) {
    auto seen = cb.get("/v1/locks/" + name);
    EXPECT_EQ(json::parse(seen.body)["holder"], "batch 9") << name << " " << seen.body;
    EXPECT_EQ(seen.body.find(owner), std::string::npos) << "never the owner id";
  }
  return owner;
}

TEST(HoldersTest, HolderIsVisibleFromAnotherSidecarAndTheOwnerIdNowhere) {
  RedisServer redis;
  auto a = startSidecar(redisBackendYaml(redis.address()), {"POD_NAME=orders-7f9c-a"});
  auto b = startSidecar(redisBackendYaml(redis.address()), {"POD_NAME=orders-7f9c-b"});
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  std::vector<std::string> owners;

  // An explicit label, seen from B; extend keeps it, release removes it (and its key).
  owners.push_back(expectHolderSeenFromB(ca, cb, "orders-42", "billing worker 3"));
  auto extended = ca.post("/v1/locks/orders-42/extend",
                          json{{"owner", owners.back()}, {"ttl_ms", 30000}}.dump());
  ASSERT_EQ(extended.status, 200) << extended.body;
  EXPECT_EQ(json::parse(cb.get("/v1/locks/orders-42").body)["holder"], "billing worker 3");
  const std::string record_ttl = redis.cli({"PTTL", "sidelock:{orders-42}:holder"});
  EXPECT_GT(std::stoll(record_ttl), 20000) << "the record follows the lease's new TTL";
  ASSERT_EQ(ca.post("/v1/locks/orders-42/release", json{{"owner", owners.back()}}.dump()).status,
            200);
  const json freed = json::parse(cb.get("/v1/locks/orders-42").body);
  EXPECT_EQ(freed["held"], false);
  EXPECT_FALSE(freed.contains("holder")) << freed.dump();
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{orders-42}:holder"}), "0");

  // A waiter of the same sidecar is handed the lock at release (one step): its label goes with it.
  auto first = ca.post("/v1/locks/handed/acquire", R"({"ttl_ms":20000,"holder":"first"})");
  ASSERT_EQ(first.status, 200) << first.body;
  owners.push_back(json::parse(first.body)["owner"]);
  const int port_a = a->port();
  auto waiter = std::async(std::launch::async, [port_a] {
    HttpClient w = HttpClient::tcp(port_a);
    return w.post("/v1/locks/handed/acquire",
                  R"({"ttl_ms":20000,"wait_ms":10000,"holder":"second"})");
  });
  ASSERT_TRUE(pollUntil([&] {  // the waiter is queued on A
    return HttpClient::tcp(port_a).get("/metrics").body.find("\nsidelock_waiters 1") !=
           std::string::npos;
  }));
  ASSERT_EQ(ca.post("/v1/locks/handed/release", json{{"owner", owners.back()}}.dump()).status, 200);
  const HttpResponse second = waiter.get();
  ASSERT_EQ(second.status, 200) << second.body;
  owners.push_back(json::parse(second.body)["owner"]);
  EXPECT_EQ(json::parse(cb.get("/v1/locks/handed").body)["holder"], "second");

  // No label given: the sidecar's identity ($POD_NAME).
  auto plain = ca.post("/v1/locks/plain/acquire", R"({"ttl_ms":20000})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  owners.push_back(json::parse(plain.body)["owner"]);
  EXPECT_EQ(json::parse(cb.get("/v1/locks/plain").body)["holder"], "orders-7f9c-a");

  // Reentrant and fair locks record it too; so does a writer of a read/write lock.
  auto re = ca.post("/v1/locks/re/acquire", R"({"ttl_ms":20000,"reentrant":true,"holder":"r"})");
  ASSERT_EQ(re.status, 200) << re.body;
  owners.push_back(json::parse(re.body)["owner"]);
  EXPECT_EQ(json::parse(cb.get("/v1/locks/re").body)["holder"], "r");
  auto fair = ca.post("/v1/locks/fair/acquire", R"({"ttl_ms":20000,"fair":true,"holder":"f"})");
  ASSERT_EQ(fair.status, 200) << fair.body;
  owners.push_back(json::parse(fair.body)["owner"]);
  EXPECT_EQ(json::parse(cb.get("/v1/locks/fair").body)["holder"], "f");
  auto busy_fair = cb.post("/v1/locks/fair/acquire", R"({"ttl_ms":1000,"fair":true})");
  EXPECT_EQ(busy_fair.status, 409) << busy_fair.body;
  EXPECT_EQ(json::parse(busy_fair.body)["holder"], "f") << busy_fair.body;

  // Readers and a semaphore's permits: each one's holder, from B too.
  for (const std::string& id : expectReadersAndPermitsSeenFromB(ca, cb, "docs", "orders-7f9c-b")) {
    owners.push_back(id);
  }
  EXPECT_EQ(redis.cli({"HLEN", "sidelock:{docs}:readers:holders"}), "1") << "B's label went";
  EXPECT_EQ(redis.cli({"HLEN", "sidelock:{docs}:sem:holders"}), "1") << "A's label went";
  // A multi-lock (one master: one step, acquire_all.lua) records it on every name.
  owners.push_back(expectMultiHolderSeenFromB(ca, cb, "acct-42", "acct-7"));

  // The owner id is nowhere: not in the logs of either sidecar, not in /metrics.
  const std::string metrics_a = ca.get("/metrics").body;
  const std::string metrics_b = cb.get("/metrics").body;
  for (const std::string& owner : owners) {
    ASSERT_FALSE(owner.empty());
    EXPECT_EQ(a->logs().find(owner), std::string::npos) << owner;
    EXPECT_EQ(b->logs().find(owner), std::string::npos) << owner;
    EXPECT_EQ(metrics_a.find(owner), std::string::npos) << owner;
    EXPECT_EQ(metrics_b.find(owner), std::string::npos) << owner;
  }
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

TEST(HoldersTest, ABadHolderIsRefusedNamingTheFieldAndChangesNothing) {
  RedisServer redis;
  auto a = startSidecar(redisBackendYaml(redis.address()));
  HttpClient c = HttpClient::tcp(a->port());
  for (const json& bad : {json(""), json(std::string(257, 'h')), json("tab\there"), json(7)}) {
    auto r = c.post("/v1/locks/x/acquire", json{{"holder", bad}}.dump());
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
    EXPECT_NE(r.body.find("holder"), std::string::npos) << r.body;
    EXPECT_EQ(json::parse(c.get("/v1/locks/x").body)["held"], false) << "nothing granted";
  }
  auto longest = c.post("/v1/locks/x/acquire", json{{"holder", std::string(256, '~')}}.dump());
  EXPECT_EQ(longest.status, 200) << longest.body;
  EXPECT_EQ(a->stop(), 0) << a->logs();
}

TEST(HoldersTest, RedlockReadsTheHolderFromTheMajority) {
  RedisServer r1, r2, r3;
  const std::string yaml = redlockBackendYaml({r1.address(), r2.address(), r3.address()});
  auto a = startSidecar(yaml);
  auto b = startSidecar(yaml);
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  // Every node up on A before the grant (ready needs only a majority): a node still connecting
  // would miss it, and the two records left below would not be a majority of holders.
  const bool all_up = pollUntil([&] {
    const json ready = json::parse(ca.get("/readyz").body);
    if (!ready.contains("nodes") || ready["nodes"].size() != 3) return false;
    for (const json& n : ready["nodes"]) {
      if (n.value("state", "") != "up") return false;
    }
    return true;
  });
  ASSERT_TRUE(all_up) << ca.get("/readyz").body;
  expectHolderSeenFromB(ca, cb, "redlocked", "pod a");
  // One node's record lost (deleted by hand): the other two are still a majority.
  r1.cli({"DEL", "sidelock:{redlocked}:holder"});
  EXPECT_EQ(json::parse(cb.get("/v1/locks/redlocked").body)["holder"], "pod a");
  r2.cli({"DEL", "sidelock:{redlocked}:holder"});
  const json unknown = json::parse(cb.get("/v1/locks/redlocked").body);
  EXPECT_EQ(unknown["held"], true);
  EXPECT_FALSE(unknown.contains("holder")) << "no majority agrees: unknown, " << unknown.dump();
  // Readers: the list of the first node that counts the readers the majority counts.
  auto reader =
      ca.post("/v1/locks/read/acquire", R"({"ttl_ms":20000,"mode":"shared","holder":"r"})");
  ASSERT_EQ(reader.status, 200) << reader.body;
  const json readers = json::parse(cb.get("/v1/locks/read").body);
  ASSERT_EQ(readers["holders"].size(), 1u) << readers.dump();
  EXPECT_EQ(readers["holders"][0]["holder"], "r");
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

TEST(HoldersTest, ClusterRecordsTheHolderInTheLeasesSlot) {
  RedisCluster cluster(3);
  const std::string yaml = "backend:\n  type: cluster\n  nodes: [\"" + cluster.address(0) +
                           "\"]\n  command_timeout_ms: 3000\n";
  auto a = startSidecar(yaml);
  auto b = startSidecar(yaml, {"POD_NAME=b"});
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  for (const char* name : {"c1", "c2", "c3", "c4"}) expectHolderSeenFromB(ca, cb, name, name);
  expectReadersAndPermitsSeenFromB(ca, cb, "c5", "b");
  expectMultiHolderSeenFromB(ca, cb, "c6", "c7");  // name by name: another slot each
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

TEST(HoldersTest, MemoryBackendListsReadersAndPermitsHolders) {
  // One sidecar (the memory backend is not shared): it is both A and B.
  auto a = startSidecar("backend:\n  type: memory\n", {"POD_NAME=solo"});
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(a->port());
  expectReadersAndPermitsSeenFromB(ca, cb, "mem", "solo");
  expectMultiHolderSeenFromB(ca, cb, "m1", "m2");
  EXPECT_EQ(a->stop(), 0) << a->logs();
}

}  // namespace
}  // namespace sidelock::testing
