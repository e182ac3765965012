// Leader election (issue 19) over /v1/elections/{name}/...: real sidecars on a real redis-server.
// Campaign streams, the leader read from any sidecar, observe streams pushed on every change,
// proclaim, resign, the readiness route, hand-over on resign / hang-up / SIGKILL, and the
// fencing property of terms. Hand-over times are printed ([election] lines) for the README.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "support/election_streams.h"
#include "support/hold_check.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_group.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

/// Who leads election `name`, as GET /v1/elections/{name} answers through `c`: null when nobody
/// leads, and after a failure (reported).
json leaderOn(HttpClient& c, const std::string& name) {
  HttpResponse r = c.get("/v1/elections/" + name);
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return nullptr;
  return json::parse(r.body)["leader"];
}

/// True once `sidecar`, SIGTERMed by the test, has exited (a zombie, reaped by its stop() at the
/// fixture's end with the exit status: a second SIGTERM before then would be a forced exit).
bool exitsOnItsOwn(const SidecarProcess& sidecar) {
  return pollUntil([&] {
    std::ifstream stat("/proc/" + std::to_string(sidecar.pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
  });
}

class ElectionTest : public TwoSidecarsOnOneRedis {};

// A leader whose lease vanished behind the sidecar's back hears `lost` with why, as the log
// says it (it used to be one text for every loss).
TEST_F(ElectionTest, ALostLeaderHearsWhy) {
  // A 3 s TTL renewed every second: a renewal stalled on a loaded machine still finds the lease
  // gone rather than letting its validity run out.
  Campaign pod_a(a->port(), "vanished", "pod-a", 3000);
  std::optional<json> e = pod_a.elected();
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ((*e)["event"], "elected") << e->dump();
  ASSERT_EQ(redis.cli({"FLUSHALL"}), "OK");
  e = pod_a.nextNotRenewed(5000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "lost") << e->dump();
  EXPECT_EQ((*e)["reason"], "renewal found the lease gone") << e->dump();
}

TEST_F(ElectionTest, TheLeaderIsTheSameOnEverySidecar) {
  Campaign pod_a(a->port(), "scheduler", "pod-a", 10000, "10.0.0.1:8080");
  std::optional<json> elected = pod_a.elected();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ((*elected)["event"], "elected");
  EXPECT_EQ((*elected)["candidate"], "pod-a");
  EXPECT_EQ((*elected)["name"], "scheduler");
  EXPECT_GT((*elected)["term"].get<uint64_t>(), 0u);
  EXPECT_FALSE((*elected)["owner"].get<std::string>().empty());
  EXPECT_EQ((*elected)["ttl_ms"], 10000);

  for (HttpClient* c : {&ca, &cb}) {
    const json leader = leaderOn(*c, "scheduler");
    ASSERT_TRUE(leader.is_object()) << leader.dump();
    EXPECT_EQ(leader["candidate"], "pod-a");
    EXPECT_EQ(leader["value"], "10.0.0.1:8080");
    EXPECT_EQ(leader["term"], (*elected)["term"]);
    EXPECT_GT(leader["since_ms"].get<int64_t>(), 1'700'000'000'000);  // Unix ms
    EXPECT_GT(leader["ttl_ms"].get<int64_t>(), 0);
    EXPECT_FALSE(leader.dump().find((*elected)["owner"].get<std::string>()) != std::string::npos)
        << "the owner id is a secret";
  }
  // The readiness route: 200 for the leader, 503 for anybody else, on any sidecar.
  EXPECT_EQ(cb.get("/v1/elections/scheduler/ready?candidate=pod-a").status, 200);
  HttpResponse not_ready = cb.get("/v1/elections/scheduler/ready?candidate=pod-b");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(json::parse(not_ready.body)["error"], "not_leader");
  EXPECT_EQ(ca.get("/v1/elections/nobody-here/ready?candidate=pod-a").status, 503);
  // A name nobody campaigned for has no leader.
  HttpResponse none = ca.get("/v1/elections/nobody-here");
  ASSERT_EQ(none.status, 200);
  EXPECT_TRUE(json::parse(none.body)["leader"].is_null()) << none.body;
  // Elections and locks of one name never meet.
  EXPECT_EQ(ca.post("/v1/locks/scheduler/acquire", R"({"ttl_ms": 5000})").status, 200);
}

TEST_F(ElectionTest, ResignHandsOverAtOnceAndTheTermGrows) {
  constexpr int64_t kTtlMs = 30000;  // a hand-over by expiry would take this long
  Campaign pod_a(a->port(), "leader", "pod-a", kTtlMs);
  std::optional<json> first = pod_a.elected();
  ASSERT_TRUE(first.has_value());
  Campaign pod_b(b->port(), "leader", "pod-b", kTtlMs);  // waits in line on the other sidecar
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(cb.get("/v1/locks").body)["waiters"].dump().find("election/leader") !=
           std::string::npos;
  })) << "pod-b never queued";

  const auto resigned_at = Clock::now();
  HttpResponse r =
      ca.post("/v1/elections/leader/resign", json{{"owner", (*first)["owner"]}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::optional<json> second = pod_b.elected();
  const int64_t handover_ms = msSince(resigned_at);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)["event"], "elected");
  EXPECT_GT((*second)["term"].get<uint64_t>(), (*first)["term"].get<uint64_t>());
  std::printf("[election] hand-over on resign (2 sidecars, 1 Redis): %lld ms\n",
              static_cast<long long>(handover_ms));
  EXPECT_LT(handover_ms, kTtlMs / 3) << "the resign was not pushed to the waiting candidate";
  // The resigned leader's stream ends with "resigned"; a second resign is refused.
  std::optional<json> end = pod_a.nextNotRenewed();
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ((*end)["event"], "resigned");
  EXPECT_FALSE(pod_a.next(2000).has_value()) << "the stream goes on after resigned";
  HttpResponse again =
      ca.post("/v1/elections/leader/resign", json{{"owner", (*first)["owner"]}}.dump());
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(json::parse(again.body)["error"], "not_leader");
}

TEST_F(ElectionTest, HangingUpResignsAndLeavesTheLine) {
  Campaign pod_a(a->port(), "hangup", "pod-a", 30000);
  ASSERT_TRUE(pod_a.elected().has_value());
  Campaign pod_c(a->port(), "hangup", "pod-c", 30000);  // queued behind pod-a, same sidecar
  Campaign pod_b(b->port(), "hangup", "pod-b", 30000);
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(ca.get("/v1/locks").body)["waiters"].dump().find("election/hangup") !=
           std::string::npos;
  }));
  pod_c.hangUp();  // leaves the line
  const auto hung_up_at = Clock::now();
  pod_a.hangUp();  // resigns
  std::optional<json> elected = pod_b.elected();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ((*elected)["candidate"], "pod-b");
  EXPECT_LT(msSince(hung_up_at), 10000);
  const json leader = json::parse(ca.get("/v1/elections/hangup").body)["leader"];
  EXPECT_EQ(leader["candidate"], "pod-b");
}

// SIGTERM: a campaign leader steps down rather than resigning at once. It stays leader (the
// lease renewed) until its client closes the stream, and only then is the next candidate elected.
TEST_F(ElectionTest, SigtermStepsDownAndHandsOverWhenTheClientCloses) {
  Campaign pod_a(a->port(), "stepdown", "pod-a", 3000);
  ASSERT_TRUE(pod_a.elected().has_value());
  Campaign pod_b(b->port(), "stepdown", "pod-b", 3000);
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(cb.get("/v1/locks").body)["waiters"].dump().find("election/stepdown") !=
           std::string::npos;
  }));
  // A lock waiter on the same sidecar holds nothing: it is answered at SIGTERM, not after the
  // step-down (up to grace / 2 later).
  ASSERT_EQ(ca.post("/v1/locks/busy/acquire", R"({"ttl_ms":30000})").status, 200);
  HttpClient waiter = HttpClient::tcp(a->port());
  waiter.sendRequest("POST", "/v1/locks/busy/acquire", R"({"ttl_ms":30000,"wait_ms":20000})");
  ASSERT_TRUE(waitForWaiters(ca, "busy", 1));
  const auto sigterm_at = Clock::now();
  ASSERT_EQ(::kill(a->pid(), SIGTERM), 0);
  std::optional<HttpResponse> refused = waiter.readResponse(3000);
  ASSERT_TRUE(refused.has_value()) << "the waiter waits for the step-down";
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(json::parse(refused->body)["error"], "shutting_down");
  EXPECT_LT(msSince(sigterm_at), 2000);
  std::optional<json> e = pod_a.nextNotRenewed();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "stepping_down");
  EXPECT_EQ((*e)["candidate"], "pod-a");
  EXPECT_EQ((*e)["reason"], "shutting_down");
  EXPECT_EQ((*e)["resign_in_ms"], 5000);  // shutdown.grace_ms (10000 by default) / 2
  // Past a TTL: still the leader, its lease renewed.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_EQ(json::parse(cb.get("/v1/elections/stepdown").body)["leader"]["candidate"], "pod-a");
  const auto closed_at = Clock::now();
  pod_a.hangUp();
  std::optional<json> elected = pod_b.elected();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ((*elected)["candidate"], "pod-b");
  EXPECT_LT(msSince(closed_at), 1500);  // at once, not after the deadline
  EXPECT_TRUE(exitsOnItsOwn(*a));
}

// A client that ignores `stepping_down` is resigned at the deadline.
TEST_F(ElectionTest, SigtermResignsALeaderThatIgnoresSteppingDownAtTheDeadline) {
  Campaign pod_a(a->port(), "stepdown2", "pod-a", 3000);
  ASSERT_TRUE(pod_a.elected().has_value());
  Campaign pod_b(b->port(), "stepdown2", "pod-b", 3000);
  const auto term_at = Clock::now();
  ASSERT_EQ(::kill(a->pid(), SIGTERM), 0);
  std::optional<json> e = pod_a.nextNotRenewed();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "stepping_down");
  e = pod_a.nextNotRenewed();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "resigned");
  EXPECT_GE(msSince(term_at), 4900);
  std::optional<json> elected = pod_b.elected();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ((*elected)["candidate"], "pod-b");
  EXPECT_TRUE(exitsOnItsOwn(*a));
}

/// The backend reads of a sidecar so far (every node's op="inspect" requests, from /metrics).
int64_t inspectReads(HttpClient& c) {
  const std::string text = c.get("/metrics").body;
  const std::string prefix = "sidelock_backend_request_seconds_count{";
  int64_t total = 0;
  for (size_t at = text.find("\n" + prefix); at != std::string::npos;
       at = text.find("\n" + prefix, at + 1)) {
    const size_t end = text.find('\n', at + 1);
    const std::string line = text.substr(at + 1, end - at - 1);
    if (line.find("op=\"inspect\"") == std::string::npos) continue;
    total += std::stoll(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

// A new observe stream costs one backend read: its group starts from the read the route makes
// first (to answer 501 on a backend without elections), not from a second one. The group's own
// re-reads (every second, and when the TTL ends) come later.
TEST_F(ElectionTest, ANewObserveStreamCostsOneBackendRead) {
  Campaign pod_a(a->port(), "seeded", "pod-a", 30000, "v1");
  std::optional<json> elected = pod_a.elected();
  ASSERT_TRUE(elected.has_value());
  const int64_t before = inspectReads(cb);
  const auto opened_at = Clock::now();
  Observer on_b(b->port(), "seeded");
  ASSERT_EQ(on_b.status(), 200);
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "leader");
  EXPECT_EQ((*e)["value"], "v1");
  const int64_t reads = inspectReads(cb) - before;
  // The group re-reads after observe_reread_ms (1 s): only a quicker look counts reads exactly.
  if (msSince(opened_at) < 800) {
    EXPECT_EQ(reads, 1) << "one read per new observe stream";
  } else {
    std::printf("[election] slow machine: the re-read may have run; %lld reads\n",
                static_cast<long long>(reads));
    EXPECT_GE(reads, 1);
  }
  // The seeded group follows changes as any group: a proclaim is pushed.
  ASSERT_EQ(ca.post("/v1/elections/seeded/proclaim",
                    json{{"owner", (*elected)["owner"]}, {"value", "v2"}}.dump())
                .status,
            200);
  e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["value"], "v2");
}

TEST_F(ElectionTest, ObserversSeeEveryChangePushedAndTermsNeverGoBack) {
  Observer on_b(b->port(), "obs");
  ASSERT_EQ(on_b.status(), 200);
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "no_leader");

  Campaign pod_a(a->port(), "obs", "pod-a", 30000, "v1");
  std::optional<json> elected = pod_a.elected();
  ASSERT_TRUE(elected.has_value());
  e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "leader");
  EXPECT_EQ((*e)["candidate"], "pod-a");
  EXPECT_EQ((*e)["value"], "v1");
  const uint64_t term1 = (*e)["term"];
  EXPECT_EQ(term1, (*elected)["term"].get<uint64_t>());

  // A second observer, on the other sidecar, starts with the current leader.
  Observer on_a(a->port(), "obs");
  e = on_a.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "leader");
  EXPECT_EQ((*e)["term"], term1);

  // Proclaim: the same term, the new value, pushed to both.
  HttpResponse p = cb.post("/v1/elections/obs/proclaim",
                           json{{"owner", (*elected)["owner"]}, {"value", "v2"}}.dump());
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(json::parse(p.body)["term"], term1);
  for (Observer* o : {&on_b, &on_a}) {
    e = o->next();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["value"], "v2");
    EXPECT_EQ((*e)["term"], term1);
  }
  // Not the leader: refused, nothing changes.
  HttpResponse refused =
      cb.post("/v1/elections/obs/proclaim", json{{"owner", "not-the-owner"}, {"value", "x"}}.dump());
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(json::parse(refused.body)["error"], "not_leader");

  // Resign with nobody in line: no_leader, pushed.
  ASSERT_EQ(ca.post("/v1/elections/obs/resign", json{{"owner", (*elected)["owner"]}}.dump()).status,
            200);
  for (Observer* o : {&on_b, &on_a}) {
    e = o->next(3000);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["event"], "no_leader");
  }
  // A new leader: a higher term.
  Campaign pod_b(b->port(), "obs", "pod-b", 30000);
  ASSERT_TRUE(pod_b.elected().has_value());
  for (Observer* o : {&on_b, &on_a}) {
    e = o->next(3000);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["candidate"], "pod-b");
    EXPECT_GT((*e)["term"].get<uint64_t>(), term1);
  }
  // The gauge counts the open streams.
  const std::string metrics = ca.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_election_observers"), 1) << metrics;
}

// While the backend is out, an observer does not go on showing a leader whose lease is over (it
// did until Redis was back): past the lease's end the stream says `unknown`, once, and the first
// read that answers again sends the state it read.
TEST_F(ElectionTest, ObserversSayUnknownWhileTheBackendIsOutPastTheLeadersTtl) {
  constexpr int64_t kTtlMs = 2000;
  Observer on_b(b->port(), "dark");
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "no_leader");
  const auto campaigned_at = Clock::now();  // the lease ends kTtlMs after this or later
  Campaign pod_a(a->port(), "dark", "pod-a", kTtlMs);
  ASSERT_TRUE(pod_a.elected().has_value());
  e = on_b.next();
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ((*e)["event"], "leader") << e->dump();
  const uint64_t term = (*e)["term"];

  redis.kill();
  e = on_b.next(kTtlMs + 4000);
  ASSERT_TRUE(e.has_value()) << "still showing pod-a long after its lease ended";
  EXPECT_EQ((*e)["event"], "unknown") << e->dump();
  EXPECT_EQ((*e)["name"], "dark");
  EXPECT_EQ((*e)["term"], term) << "the highest term seen";
  EXPECT_GE(msSince(campaigned_at), kTtlMs - 100) << "vouched for until the lease's end";
  // Once: nothing more while Redis stays away.
  EXPECT_FALSE(on_b.next(1500).has_value());
  // An observer that comes meanwhile is told `unknown` too, not the leader the group last read.
  Observer late(b->port(), "dark");
  e = late.next(5000);
  ASSERT_TRUE(e.has_value()) << "no first line while Redis is away";
  EXPECT_EQ((*e)["event"], "unknown") << e->dump();
  EXPECT_EQ((*e)["term"], term);

  redis.restart();  // empty: pod-a's lease is gone
  e = on_b.next(10000);
  ASSERT_TRUE(e.has_value()) << "no state after the backend came back";
  // pod-a's sidecar may have campaigned again meanwhile (a new term), or not yet.
  if ((*e)["event"] == "leader") {
    EXPECT_GT((*e)["term"].get<uint64_t>(), term) << e->dump();
  } else {
    EXPECT_EQ((*e)["event"], "no_leader") << e->dump();
  }
}

TEST_F(ElectionTest, AKilledLeadersSidecarHandsOverAfterTheTtlAndFencingHolds) {
  constexpr int64_t kTtlMs = 2000;
  Observer on_b(b->port(), "crash");
  ASSERT_TRUE(on_b.next().has_value());  // no_leader
  Campaign pod_a(a->port(), "crash", "pod-a", kTtlMs);
  std::optional<json> first = pod_a.elected();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(on_b.next().has_value());  // pod-a leads
  Campaign pod_b(b->port(), "crash", "pod-b", kTtlMs);

  const auto killed_at = Clock::now();
  a->kill();  // SIGKILL: nothing resigns; the lease must run out
  std::optional<json> second = pod_b.elected(kTtlMs * 5);
  const int64_t handover_ms = msSince(killed_at);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)["candidate"], "pod-b");
  std::printf("[election] hand-over after SIGKILL of the leader's sidecar (TTL %lld ms): %lld ms\n",
              static_cast<long long>(kTtlMs), static_cast<long long>(handover_ms));
  // At least the lease left after the last renewal (renewals come every third of the TTL).
  EXPECT_GE(handover_ms, kTtlMs / 3) << "a new leader before the old lease could have run out";

  // The fencing property: a resource that keeps the highest term it saw refuses the deposed
  // leader's writes. Terms only grow, so the new leader's is higher.
  const uint64_t deposed = (*first)["term"], current = (*second)["term"];
  EXPECT_GT(current, deposed);
  uint64_t resource_term = current;  // the new leader wrote first
  auto accepts = [&](uint64_t term) {
    if (term < resource_term) return false;
    resource_term = term;
    return true;
  };
  EXPECT_FALSE(accepts(deposed));
  EXPECT_TRUE(accepts(current));

  // The observer on b saw pod-b's term, never a lower one after it.
  uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    std::optional<json> e = on_b.next(kTtlMs * 2);
    if (!e) break;
    if ((*e)["event"] == "leader") {
      EXPECT_GE((*e)["term"].get<uint64_t>(), last);
      last = (*e)["term"];
      if ((*e)["candidate"] == "pod-b") break;
    }
  }
  EXPECT_EQ(last, current);
}

// Three sidecars, one candidate on each, campaigning again whenever they stop leading. The
// leader's sidecar is killed (SIGKILL) and, later, stopped (SIGSTOP) for 3 x TTL. Each candidate
// records the windows in which it may act as leader: from its `elected` event to its end event,
// and never later than a third of a TTL after its last `elected`/`renewed` event (what a careful
// leader does: a silent stream means a lease that may be running out). No two windows may overlap, the
// terms grow with every new leader, and observers never see a term go backwards.
TEST(ElectionChaosTest, ThreeSidecarsNeverHaveTwoLeadersAcrossKillAndPause) {
  constexpr int64_t kTtlMs = 1000;
  constexpr size_t kSidecars = 3;
  SidecarGroup group(kSidecars);
  std::atomic<bool> stop{false};
  std::array<std::atomic<int>, kSidecars> generation{};  // bumped on each kill and restart
  std::mutex mu;
  HoldLog windows;
  std::vector<std::pair<int64_t, uint64_t>> elections;  // (elected at, term)
  std::vector<std::string> trace;  // what happened when, printed if the test fails
  auto since_start = [start = Clock::now()] { return msSince(start); };
  std::vector<std::thread> candidates;
  for (size_t i = 0; i < kSidecars; ++i) {
    candidates.emplace_back([&, i, port = group[i]->port()] {
      const std::string me = "cand-" + std::to_string(i);
      while (!stop) {
        std::unique_ptr<Campaign> c;
        try {
          c = std::make_unique<Campaign>(port, "chaos", me, kTtlMs);
        } catch (...) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        // Read after connecting; a kill bumps it, which ends the wait on the dead connection.
        const int gen = generation[i];
        std::optional<json> e;
        while (!stop && gen == generation[i] && !(e = c->elected(200))) {
        }
        if (!e || (*e)["event"] != "elected") continue;
        const auto from = HoldLog::now();
        auto last = from;
        {
          std::lock_guard lock(mu);
          elections.emplace_back(since_start(), (*e)["term"].get<uint64_t>());
          trace.push_back(std::to_string(since_start()) + " ms: " + me + " elected");
        }
        while (!stop) {
          std::optional<json> next = c->next(static_cast<int>(kTtlMs));
          if (next && (*next)["event"] == "renewed") {
            last = HoldLog::now();
            continue;
          }
          break;  // lost, resigned, closed, or silent for a TTL
        }
        const auto to = std::min(HoldLog::now(), last + std::chrono::milliseconds(kTtlMs / 3));
        windows.record("chaos", from, to, HoldMode::kExclusive, me);
        {
          std::lock_guard lock(mu);
          trace.push_back(std::to_string(since_start()) + " ms: " + me + " stops leading");
        }
      }
    });
  }
  std::vector<std::unique_ptr<Observer>> observers;
  for (size_t i = 0; i < kSidecars; ++i) {
    observers.push_back(std::make_unique<Observer>(group[i]->port(), "chaos"));
  }

  // Who leads, as sidecar `i` reads it (a new connection each time: a killed or stopped sidecar
  // breaks its connections); "" when nobody does or it cannot answer.
  auto leader = [&](size_t i) -> std::string {
    try {
      HttpClient c = HttpClient::tcp(group[i]->port());
      const HttpResponse r = c.request("GET", "/v1/elections/chaos", "", 1000);
      const json l = json::parse(r.body)["leader"];
      return l.is_object() ? l["candidate"].get<std::string>() : "";
    } catch (...) {
      return "";
    }
  };
  auto faultLeader = [&](bool pause) {
    std::string current;
    ASSERT_TRUE(pollUntil([&] { return !(current = leader(0)).empty() || !(current = leader(1)).empty(); }));
    const size_t victim = static_cast<size_t>(current.back() - '0');
    {
      std::lock_guard lock(mu);
      trace.push_back(std::to_string(since_start()) + " ms: " + (pause ? "SIGSTOP" : "SIGKILL") +
                      " of " + current + "'s sidecar");
    }
    const size_t witness = (victim + 1) % kSidecars;
    auto newLeader = [&] {
      const std::string now = leader(witness);
      return !now.empty() && now != current;
    };
    if (pause) {
      group[victim]->pause();
      const bool elected = pollUntil(newLeader);
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * kTtlMs));
      group[victim]->resume();
      ASSERT_TRUE(elected) << "no new leader while " << current << "'s sidecar was stopped";
    } else {
      ++generation[victim];
      group[victim]->kill();
      const bool elected = pollUntil(newLeader);
      // No second bump: nothing could connect to the killed sidecar, and a thread that connects
      // to the restarted one must keep its campaign (it may be elected at once).
      group[victim]->restart();
      ASSERT_TRUE(elected) << "no new leader after " << current << "'s sidecar was killed";
    }
  };
  faultLeader(/*pause=*/false);
  faultLeader(/*pause=*/true);
  faultLeader(/*pause=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(kTtlMs));
  stop = true;
  for (auto& t : candidates) t.join();

  const ExclusionReport report = checkExclusion(windows.holds());
  EXPECT_TRUE(report.violations.empty()) << report.violations.front();
  std::lock_guard lock(mu);
  // Every fault changed the leader (faultLeader asserts it through GET), and every leader is a
  // candidate thread's: the threads saw each election.
  EXPECT_GE(elections.size(), 4u) << "an election no candidate thread recorded";
  std::sort(elections.begin(), elections.end());
  for (size_t i = 1; i < elections.size(); ++i) {
    EXPECT_GT(elections[i].second, elections[i - 1].second) << "a later leader got a lower term";
  }
  std::printf("[election] chaos: %zu leaders, %zu windows, no overlap\n", elections.size(),
              windows.size());
  if (elections.size() < 4 || ::testing::Test::HasFailure()) {
    for (const std::string& line : trace) std::printf("[election] %s\n", line.c_str());
  }
  for (auto& o : observers) {
    uint64_t last = 0;
    while (std::optional<json> e = o->next(100)) {
      if ((*e)["event"] != "leader") continue;
      EXPECT_GE((*e)["term"].get<uint64_t>(), last) << "an observer saw a term go back";
      last = (*e)["term"];
    }
  }
  group.expectCleanStops();
}

// Redlock: two sidecars over the same three nodes see one leader; an observer on the other
// sidecar is pushed the grant, a proclaim and the next leader after a resign (announcements from
// each node, coalesced), and the term grows.
TEST(ElectionRedlockTest, TwoSidecarsSeeOneLeaderAndObserversFollowOnRedlock) {
  RedlockSidecar redlock(3);
  std::vector<std::string> addresses;
  for (const auto& node : redlock.nodes) addresses.push_back(node->address());
  SidecarProcess second(SidecarProcess::Options{redlockBackendYaml(addresses), {}, true});
  HttpClient ca = HttpClient::tcp(redlock.sidecar->port());
  HttpClient cb = HttpClient::tcp(second.port());

  Observer on_b(second.port(), "e");
  ASSERT_EQ(on_b.status(), 200);
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "no_leader");

  constexpr int64_t kTtlMs = 30000;  // a hand-over or a change seen by expiry would take this long
  Campaign pod_a(redlock.sidecar->port(), "e", "pod-a", kTtlMs, "v1");
  std::optional<json> first = pod_a.elected();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ((*first)["event"], "elected") << first->dump();
  const uint64_t term1 = (*first)["term"];
  e = on_b.next(3000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["candidate"], "pod-a");
  EXPECT_EQ((*e)["term"], term1);
  for (HttpClient* c : {&ca, &cb}) {
    const json leader = leaderOn(*c, "e");
    ASSERT_TRUE(leader.is_object()) << leader.dump();
    EXPECT_EQ(leader["candidate"], "pod-a");
    EXPECT_EQ(leader["value"], "v1");
    EXPECT_EQ(leader["term"], term1);
    EXPECT_GT(leader["ttl_ms"].get<int64_t>(), kTtlMs / 2);
  }
  EXPECT_EQ(cb.get("/v1/elections/e/ready?candidate=pod-a").status, 200);

  // Proclaim through the other sidecar: pushed to the observer, the same term.
  HttpResponse p = cb.post("/v1/elections/e/proclaim",
                           json{{"owner", (*first)["owner"]}, {"value", "v2"}}.dump());
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(json::parse(p.body)["term"], term1);
  e = on_b.next(3000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["value"], "v2");
  EXPECT_EQ((*e)["term"], term1);
  HttpResponse refused =
      cb.post("/v1/elections/e/proclaim", json{{"owner", "not-the-owner"}, {"value", "x"}}.dump());
  EXPECT_EQ(refused.status, 409) << refused.body;

  // A candidate in line on the other sidecar is elected at once after the resign.
  Campaign pod_b(second.port(), "e", "pod-b", kTtlMs);
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(cb.get("/v1/locks").body)["waiters"].dump().find("election/e") !=
           std::string::npos;
  })) << "pod-b never queued";
  const auto resigned_at = Clock::now();
  ASSERT_EQ(ca.post("/v1/elections/e/resign", json{{"owner", (*first)["owner"]}}.dump()).status,
            200);
  std::optional<json> second_term = pod_b.elected();
  const int64_t handover_ms = msSince(resigned_at);
  ASSERT_TRUE(second_term.has_value());
  EXPECT_EQ((*second_term)["event"], "elected") << second_term->dump();
  EXPECT_GT((*second_term)["term"].get<uint64_t>(), term1);
  std::printf("[election] hand-over on resign (2 sidecars, Redlock over 3 nodes): %lld ms\n",
              static_cast<long long>(handover_ms));
  EXPECT_LT(handover_ms, kTtlMs / 3) << "the resign was not pushed to the waiting candidate";
  // The observer sees pod-b (possibly after a no_leader in between), pushed.
  bool saw_b = false;
  for (int i = 0; i < 3 && !saw_b; ++i) {
    e = on_b.next(3000);
    ASSERT_TRUE(e.has_value());
    saw_b = (*e)["event"] == "leader" && (*e)["candidate"] == "pod-b";
    if (saw_b) {
      EXPECT_EQ((*e)["term"], (*second_term)["term"]);
    }
  }
  EXPECT_TRUE(saw_b);
  EXPECT_EQ(second.stop(), 0) << second.logs();
  EXPECT_EQ(redlock.sidecar->stop(), 0) << redlock.sidecar->logs();
}

TEST_F(ElectionTest, BadInputIsRefusedAndChangesNothing) {
  struct Case {
    std::string path;
    std::string body;
    int status;
  };
  const std::string big(4097, 'v');
  const std::vector<Case> cases = {
      {"/v1/elections/e/campaign", "{}", 400},
      {"/v1/elections/e/campaign", R"({"candidate": ""})", 400},
      {"/v1/elections/e/campaign", R"({"candidate": "a\u0001b"})", 400},
      {"/v1/elections/e/campaign", json{{"candidate", std::string(257, 'c')}}.dump(), 400},
      {"/v1/elections/e/campaign", json{{"candidate", "c"}, {"value", big}}.dump(), 400},
      {"/v1/elections/e/campaign", R"({"candidate": "c", "ttl_ms": 0})", 400},
      {"/v1/elections/e/campaign", R"({"candidate": "c", "wait_ms": 10})", 400},
      {"/v1/elections/e{x}/campaign", R"({"candidate": "c"})", 400},
      {"/v1/elections/e/proclaim", R"({"owner": "o"})", 400},
      {"/v1/elections/e/proclaim", R"({"value": "v"})", 400},
      {"/v1/elections/e/resign", "{}", 400},
      {"/v1/elections/e/resign", R"({"owner": "nobody"})", 409},
  };
  for (const Case& c : cases) {
    HttpResponse r = ca.post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body << " -> " << r.body;
    if (r.status >= 400) {
      EXPECT_FALSE(json::parse(r.body)["error"].get<std::string>().empty());
    }
  }
  EXPECT_TRUE(json::parse(ca.get("/v1/elections/e").body)["leader"].is_null());
  EXPECT_EQ(redis.cli({"DBSIZE"}), "0") << "bad input wrote to Redis";
}

}  // namespace
}  // namespace sidelock::testing
