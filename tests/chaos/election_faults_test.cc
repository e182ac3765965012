// Leader election under backend faults (issue 19, "Tests that prove it"): three sidecars, three
// candidates that lead for a while, resign and campaign again, and an observer on every sidecar,
// across a Redis restart (with appendfsync always; and empty, after the leases ran out) and a
// Sentinel failover. Each candidate records the window in which it may act as leader: from its
// `elected` event to its hang-up or end event, and never later than a third of a TTL after its
// last `elected`/`renewed` event (a careful leader: a silent stream is a lease that may be running
// out). No two windows may overlap, terms grow with every leader, observers never see a term go
// back and report only leaders a candidate recorded. Also: observers on every sidecar see the same
// leaders and a `no_leader` when the leader dies without a successor, and a fenced resource
// refuses a deposed leader's write. Each run prints an [election-chaos] line.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chaos/cluster.h"
#include "chaos/fenced_register.h"
#include "chaos/history.h"
#include "support/election_streams.h"
#include "support/hold_check.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing::chaos {
namespace {

using nlohmann::json;

constexpr int64_t kTtlMs = 1000;
constexpr int64_t kHoldMs = 300;  // each leader resigns after this (hangs up), then campaigns again

void sleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

struct Leadership {
  std::string candidate;
  uint64_t term = 0;
  int64_t elected_us = 0;  // when its `elected` event arrived (nowUs())
};

struct Seen {
  int64_t at_us = 0;
  json event;
};

/// Candidates (one per sidecar port) rotating the leadership of `name`, and an observer on every
/// sidecar; check() judges what they recorded.
class ElectionRun {
 public:
  ElectionRun(std::vector<int> ports, std::string name) : ports_(std::move(ports)), name_(name) {
    seen_.resize(ports_.size());
    for (size_t i = 0; i < ports_.size(); ++i) {
      observers_.emplace_back([this, i] { observe(i); });
    }
    for (size_t i = 0; i < ports_.size(); ++i) {
      candidates_.emplace_back([this, i] { campaign(i); });
    }
  }
  ~ElectionRun() { stop(); }

  /// Observers stop first (every leader they saw was elected while the candidates still ran and
  /// read their `elected` events), then the candidates.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    stop_observers_ = true;
    for (auto& t : observers_) t.join();
    sleepMs(300);
    stop_candidates_ = true;
    for (auto& t : candidates_) t.join();
  }

  /// Waits until `count` more leaders were elected after `after_us`.
  bool waitForElections(int64_t after_us, size_t count, int64_t timeout_ms = 10000) {
    return pollUntil(timeout_ms, [&] {
      std::lock_guard lock(mu_);
      return static_cast<size_t>(std::count_if(elections_.begin(), elections_.end(), [&](auto& l) {
               return l.elected_us > after_us;
             })) >= count;
    });
  }

  void trace(const std::string& line) {
    std::lock_guard lock(mu_);
    trace_.push_back(std::to_string(nowUs() / 1000) + " ms: " + line);
  }

  /// Every property the run must have; prints one [election-chaos] line for `scenario`.
  /// `given_back_seen`: with Sentinel's wait_replicas a grant that no replica acknowledged is
  /// given back, but observers may read it before that (a leader its candidate never heard of);
  /// such reports are counted and printed rather than failed.
  void check(const std::string& scenario, bool given_back_seen = false) {
    stop();
    std::lock_guard lock(mu_);
    const ExclusionReport report = checkExclusion(windows_.holds());
    EXPECT_TRUE(report.violations.empty()) << scenario << ": " << report.violations.front();
    std::vector<Leadership> order = elections_;
    std::sort(order.begin(), order.end(),
              [](auto& a, auto& b) { return a.elected_us < b.elected_us; });
    std::map<uint64_t, std::string> leader_of;
    for (size_t i = 0; i < order.size(); ++i) {
      leader_of[order[i].term] = order[i].candidate;
      if (i > 0) {
        EXPECT_GT(order[i].term, order[i - 1].term)
            << scenario << ": " << order[i].candidate << " was elected after "
            << order[i - 1].candidate << " with a term not above its";
      }
    }
    size_t observed_leaders = 0;
    size_t unrecorded = 0;
    for (size_t i = 0; i < seen_.size(); ++i) {
      uint64_t last = 0;
      for (const Seen& s : seen_[i]) {
        if (s.event["event"] != "leader") continue;
        const uint64_t term = s.event["term"];
        EXPECT_GE(term, last) << scenario << ": the observer on sidecar " << i
                              << " saw a term go back: " << s.event.dump();
        last = term;
        ++observed_leaders;
        // A leader no candidate recorded would be a window the overlap check cannot see.
        auto it = leader_of.find(term);
        if (it != leader_of.end() && it->second == s.event["candidate"]) continue;
        ++unrecorded;
        trace_.push_back("observer " + std::to_string(i) + " at " + std::to_string(s.at_us / 1000) +
                         " ms reported a leader no candidate heard of: " + s.event.dump());
        EXPECT_TRUE(given_back_seen) << scenario << ": the observer on sidecar " << i
                                     << " reported a leader no candidate recorded: "
                                     << s.event.dump();
      }
      EXPECT_GT(last, 0u) << scenario << ": the observer on sidecar " << i << " saw no leader";
    }
    std::printf("[election-chaos] %s: %zu leaders, %zu windows (most at once %d), %zu leader "
                "events on %zu observers (%zu of leaders no candidate heard of), %zu overlaps\n",
                scenario.c_str(), order.size(), windows_.size(), report.most_at_once,
                observed_leaders, seen_.size(), unrecorded, report.violations.size());
    if (::testing::Test::HasFailure() || unrecorded > 0) {
      for (const std::string& line : trace_) std::printf("[election-chaos] %s\n", line.c_str());
    }
  }

  std::vector<Leadership> elections() const {
    std::lock_guard lock(mu_);
    return elections_;
  }

 private:
  void campaign(size_t i) {
    const std::string me = "cand-" + std::to_string(i);
    while (!stop_candidates_) {
      std::unique_ptr<Campaign> c;
      try {
        c = std::make_unique<Campaign>(ports_[i], name_, me, kTtlMs);
      } catch (...) {
        sleepMs(50);
        continue;
      }
      std::optional<json> e;
      while (!stop_candidates_ && !(e = c->elected(200))) {
      }
      if (!e) e = c->elected(200);  // elected just as the run stopped
      if (!e || !e->contains("event") || (*e)["event"] != "elected") {
        if (e) trace(me + " campaign answered " + e->dump());
        sleepMs(20);
        continue;
      }
      const auto from = HoldLog::now();
      auto last = from;
      const uint64_t term = (*e)["term"];
      {
        std::lock_guard lock(mu_);
        elections_.push_back({me, term, nowUs()});
      }
      trace(me + " elected, term " + std::to_string(term));
      const auto hold_until = from + std::chrono::milliseconds(kHoldMs);
      std::string end = "hold over";
      while (HoldLog::now() < hold_until) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(hold_until - HoldLog::now());
        std::optional<json> next = c->next(static_cast<int>(std::max<int64_t>(1, left.count())));
        if (next && (*next)["event"] == "renewed") {
          last = HoldLog::now();
          continue;
        }
        if (next) end = next->dump();
        break;  // lost, resigned, closed, or the hold is over
      }
      const auto to = std::min(HoldLog::now(), last + std::chrono::milliseconds(kTtlMs / 3));
      windows_.record(name_, from, to, HoldMode::kExclusive, me + " term " + std::to_string(term));
      c->hangUp();  // resigns
      trace(me + " stops leading: " + end);
    }
  }

  void observe(size_t i) {
    std::unique_ptr<Observer> o;
    while (!stop_observers_ && !o) {
      try {
        o = std::make_unique<Observer>(ports_[i], name_);
      } catch (...) {
        sleepMs(50);
      }
    }
    while (o && !stop_observers_) {
      std::optional<json> e = o->next(100);
      if (!e) continue;
      std::lock_guard lock(mu_);
      seen_[i].push_back({nowUs(), *e});
    }
  }

  const std::vector<int> ports_;
  const std::string name_;
  mutable std::mutex mu_;
  HoldLog windows_;
  std::vector<Leadership> elections_;
  std::vector<std::vector<Seen>> seen_;
  std::vector<std::string> trace_;
  std::atomic<bool> stop_observers_{false};
  std::atomic<bool> stop_candidates_{false};
  bool stopped_ = false;
  std::vector<std::thread> observers_;
  std::vector<std::thread> candidates_;
};

ClusterOptions threeSidecars(bool persistence) {
  ClusterOptions options;
  options.sidecars = 3;
  options.persistence = persistence;
  return options;
}

// (a) appendfsync always: the leases and the term counter survive. A quick restart (the leader's
// lease outlives the outage) and one longer than the TTL (every lease expires meanwhile).
TEST(ElectionFaults, RedisRestartedWithAppendfsyncAlways) {
  Cluster cluster(threeSidecars(/*persistence=*/true));
  ElectionRun run(cluster.sidecarPorts(), "durable");
  ASSERT_TRUE(run.waitForElections(0, 3));
  for (int64_t down_ms : {int64_t{0}, kTtlMs + kTtlMs / 2}) {
    run.trace("kill -9 of Redis, down " + std::to_string(down_ms) + " ms");
    cluster.node(0).kill();
    sleepMs(down_ms);
    cluster.node(0).restart();
    const int64_t back_us = nowUs();
    run.trace("Redis is back");
    EXPECT_TRUE(run.waitForElections(back_us, 2)) << "no election after the restart";
  }
  run.check("Redis restarted with appendfsync always");
  EXPECT_EQ(cluster.sidecar(0).stop(), 0) << cluster.sidecar(0).logs();
}

// Redis restarted without its data: the term counter is recreated from Redis's clock, so terms
// still grow. Exclusion holds only because the restart comes after the TTL (no lease it forgot
// could still be relied on): README "Sentinel: safety limits" / Redlock's delayed restarts.
TEST(ElectionFaults, RedisRestartedEmptyAfterTheTtlTermsStillGrow) {
  Cluster cluster(threeSidecars(/*persistence=*/false));
  ElectionRun run(cluster.sidecarPorts(), "volatile");
  ASSERT_TRUE(run.waitForElections(0, 3));
  const std::vector<Leadership> before = run.elections();
  run.trace("kill -9 of Redis, restarted empty after 1.5 TTL");
  cluster.node(0).kill();
  sleepMs(kTtlMs + kTtlMs / 2);
  cluster.node(0).restart();
  const int64_t back_us = nowUs();
  EXPECT_TRUE(run.waitForElections(back_us, 2)) << "no election after the restart";
  run.check("Redis restarted empty after the TTL");
  uint64_t highest_before = 0;
  for (const Leadership& l : before) highest_before = std::max(highest_before, l.term);
  for (const Leadership& l : run.elections()) {
    if (l.elected_us > back_us) {
      EXPECT_GT(l.term, highest_before) << "a term after the empty restart is not above the "
                                           "terms before it";
    }
  }
  EXPECT_EQ(cluster.sidecar(0).stop(), 0) << cluster.sidecar(0).logs();
}

// (b) A Sentinel failover (kill -9 of the master; the sentinel promotes the replica with the most
// data) while leaders rotate; wait_replicas: 1, so every term a candidate saw is on a replica.
// Not SENTINEL FAILOVER: the old master stays up and keeps granting, acknowledged by the replica
// not yet moved, until the sentinel demotes it, so with wait_replicas below the number of
// replicas a term can go back (seen here: README "Sentinel: safety limits").
TEST(ElectionFaults, SentinelFailoverKeepsOneLeaderAndTermsGrow) {
  constexpr const char* kMaster = "elections";
  // Full syncs at once, also from the promoted replica (Redis waits 5 s for more replicas
  // otherwise), and two replicas, so the promoted one soon has one that acknowledges its grants.
  const RedisServer::Options quick_sync{false, {"--repl-diskless-sync-delay", "0"}};
  RedisServer master(quick_sync);
  RedisServer::Role replica_role;
  replica_role.replica_of = master.address();
  RedisServer replica(quick_sync, replica_role);
  RedisServer spare(quick_sync, replica_role);
  ASSERT_TRUE(pollUntil(10000, [&] {
    const std::string info = master.cli({"INFO", "replication"});
    return info.find("connected_slaves:2") != std::string::npos &&
           info.find("state=online") != info.rfind("state=online");
  })) << "the replicas never finished their first sync";
  std::unique_ptr<RedisServer> sentinel = RedisServer::startSentinel(master, kMaster, 1);
  ASSERT_TRUE(pollUntil(10000, [&] {
    return sentinel->cli({"SENTINEL", "master", kMaster}).find("num-slaves\n2") !=
           std::string::npos;
  })) << sentinel->cli({"SENTINEL", "master", kMaster});
  const std::string yaml =
      "backend:\n  type: sentinel\n  nodes: [\"" + sentinel->address() +
      "\"]\n  reconnect_min_ms: 20\n  reconnect_max_ms: 200\n  health_interval_ms: 100\n"
      "  command_timeout_ms: 1000\n  sentinel:\n    master_name: " +
      kMaster + "\n    wait_replicas: 1\nlocks:\n  max_ttl_ms: 2000\n  default_ttl_ms: 1000\n  retry_max_ms: 50\n"
                "log:\n  level: error\n";
  std::vector<std::unique_ptr<SidecarProcess>> sidecars;
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    sidecars.push_back(
        std::make_unique<SidecarProcess>(SidecarProcess::Options{yaml, {}, /*wait_ready=*/true}));
    ports.push_back(sidecars.back()->port());
  }
  ElectionRun run(ports, "failover");
  ASSERT_TRUE(run.waitForElections(0, 3));
  run.trace("kill -9 of the master");
  master.kill();
  const std::string old_master = std::to_string(master.port());
  ASSERT_TRUE(pollUntil(30000, [&] {
    const std::string now = sentinel->cli({"SENTINEL", "get-master-addr-by-name", kMaster});
    return !now.empty() && now.find(old_master) == std::string::npos;
  })) << "the sentinel never promoted a replica";
  const int64_t switched_us = nowUs();
  run.trace("the sentinel names a replica as master");
  EXPECT_TRUE(run.waitForElections(switched_us, 2, 15000)) << "no election after the failover";
  run.check("Sentinel failover", /*given_back_seen=*/true);
  for (auto& s : sidecars) EXPECT_EQ(s->stop(), 0) << s->logs();
}

/// Every `leader` event of `o` until `until` holds (a state after which nothing more comes).
std::vector<json> leaderEventsUntil(Observer& o, const std::function<bool(const json&)>& until) {
  std::vector<json> events;
  while (std::optional<json> e = o.next(5000)) {
    events.push_back(*e);
    if (until(*e)) break;
  }
  return events;
}

// Observers on every sidecar see the same leaders in the same order, with the values proclaimed,
// and a no_leader when the leader's sidecar is killed with nobody left in line.
TEST(ElectionFaults, ObserversOnEverySidecarAgreeAndSeeNoLeaderWhenTheLeaderDies) {
  Cluster cluster(threeSidecars(/*persistence=*/false));
  std::vector<std::unique_ptr<Observer>> observers;
  for (int i = 0; i < 3; ++i) {
    observers.push_back(std::make_unique<Observer>(cluster.sidecar(i).port(), "agree"));
    ASSERT_EQ(observers.back()->status(), 200);
  }
  std::vector<std::vector<json>> seen(3);
  // Reads each observer until it shows `want` (a leader's term and value, or no_leader).
  auto allSee = [&](const std::string& event, uint64_t term, const std::string& value) {
    for (size_t i = 0; i < observers.size(); ++i) {
      if (!observers[i]) continue;
      std::vector<json> got = leaderEventsUntil(*observers[i], [&](const json& e) {
        return e["event"] == event && (event == "no_leader" || (e["term"] == term &&
                                                                e["value"] == value));
      });
      ASSERT_FALSE(got.empty()) << "observer " << i << " saw nothing";
      EXPECT_EQ(got.back()["event"], event) << "observer " << i << ": " << got.back().dump();
      seen[i].insert(seen[i].end(), got.begin(), got.end());
    }
  };
  allSee("no_leader", 0, "");

  std::map<uint64_t, std::string> elected;  // term -> candidate, from the campaign streams
  std::vector<std::unique_ptr<Campaign>> campaigns;
  for (int i = 0; i < 3; ++i) {
    campaigns.push_back(std::make_unique<Campaign>(cluster.sidecar(i).port(), "agree",
                                                   "pod-" + std::to_string(i), kTtlMs,
                                                   "v" + std::to_string(i)));
    if (i == 0) {
      std::optional<json> e = campaigns[0]->elected();
      ASSERT_TRUE(e.has_value());
      ASSERT_EQ((*e)["event"], "elected");
      elected[(*e)["term"]] = "pod-0";
      allSee("leader", (*e)["term"], "v0");
      HttpClient c = HttpClient::tcp(cluster.sidecar(1).port());
      ASSERT_EQ(c.post("/v1/elections/agree/proclaim",
                       json{{"owner", (*e)["owner"]}, {"value", "v0b"}}.dump())
                    .status,
                200);
      allSee("leader", (*e)["term"], "v0b");
    }
  }
  // pod-0 resigns (hangs up); pod-1 and pod-2 lead in turn, in whichever order they were queued.
  size_t leader = 0;
  std::set<size_t> waiting = {1, 2};
  uint64_t last_term = elected.begin()->first;
  while (!waiting.empty()) {
    campaigns[leader]->hangUp();
    std::optional<json> e;
    size_t next = 0;
    ASSERT_TRUE(pollUntil(10000, [&] {
      for (size_t w : waiting) {
        if ((e = campaigns[w]->elected(20)) && (*e)["event"] == "elected") {
          next = w;
          return true;
        }
      }
      return false;
    })) << "nobody was elected after pod-" << leader << " resigned";
    EXPECT_GT((*e)["term"].get<uint64_t>(), last_term);
    last_term = (*e)["term"];
    elected[last_term] = (*e)["candidate"];
    allSee("leader", last_term, "v" + std::to_string(next));
    waiting.erase(next);
    leader = next;
  }
  // The last leader's sidecar dies with nobody in line: the others' observers see no_leader
  // within the TTL plus one read; its own observer's stream just ends.
  const auto killed_at = std::chrono::steady_clock::now();
  cluster.sidecar(static_cast<int>(leader)).kill();
  observers[leader].reset();
  allSee("no_leader", 0, "");
  const auto no_leader_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - killed_at)
                                .count();
  std::printf("[election-chaos] no_leader on the other sidecars %lld ms after SIGKILL of the "
              "leader's (TTL %lld ms)\n",
              static_cast<long long>(no_leader_ms), static_cast<long long>(kTtlMs));
  EXPECT_LT(no_leader_ms, kTtlMs + 2000);

  // The same leaders (term, candidate, value) in the same order on every surviving sidecar, each
  // one a campaign's; terms never go back. (no_leader between two leaders may show on one
  // observer and not on another: a read can fall after the resign or after the next election.)
  std::vector<std::vector<json>> leaders(3);
  for (size_t i = 0; i < 3; ++i) {
    uint64_t last = 0;
    for (const json& e : seen[i]) {
      if (e["event"] != "leader") continue;
      EXPECT_GE(e["term"].get<uint64_t>(), last) << "observer " << i << " went back";
      last = e["term"];
      EXPECT_EQ(elected[last], e["candidate"]) << "observer " << i << ": " << e.dump();
      leaders[i].push_back(json{{"term", e["term"]}, {"candidate", e["candidate"]},
                                {"value", e["value"]}});
    }
  }
  std::vector<size_t> alive;
  for (size_t i = 0; i < 3; ++i) {
    if (i != leader) alive.push_back(i);
  }
  EXPECT_EQ(leaders[alive[0]].size(), 4u) << json(leaders[alive[0]]).dump();
  EXPECT_EQ(leaders[alive[0]], leaders[alive[1]]);
  // The dead sidecar's observer saw the same, up to its death.
  EXPECT_EQ(leaders[leader], leaders[alive[0]]);
  for (size_t i : alive) {
    EXPECT_EQ(seen[i].back()["event"], "no_leader");
    EXPECT_EQ(cluster.sidecar(static_cast<int>(i)).stop(), 0)
        << cluster.sidecar(static_cast<int>(i)).logs();
  }
}

// The fencing property with a real resource: a register (in its own redis-server) that refuses
// a term lower than the highest it saw. Leader A writes, its sidecar is stopped past the TTL, B is
// elected and writes; A, resumed and unaware, writes with its old term and is refused.
TEST(ElectionFaults, AFencedResourceRefusesTheDeposedLeader) {
  ClusterOptions options;
  options.sidecars = 2;
  Cluster cluster(options);
  FencedRegister resource(cluster.resource().port());
  const std::string key = "register:leader-work";

  Campaign a(cluster.sidecar(0).port(), "fenced", "pod-a", kTtlMs);
  std::optional<json> a_elected = a.elected();
  ASSERT_TRUE(a_elected.has_value());
  const uint64_t term_a = (*a_elected)["term"];
  FencedRegister::Access w = resource.write(key, term_a, 1, /*fenced=*/true);
  EXPECT_TRUE(w.accepted);

  Campaign b(cluster.sidecar(1).port(), "fenced", "pod-b", kTtlMs);
  const auto stopped_at = std::chrono::steady_clock::now();
  cluster.sidecar(0).pause();  // A's sidecar renews nothing: its lease runs out
  std::optional<json> b_elected = b.elected(5 * kTtlMs);
  const auto deposed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - stopped_at)
                              .count();
  cluster.sidecar(0).resume();
  ASSERT_TRUE(b_elected.has_value());
  ASSERT_EQ((*b_elected)["event"], "elected");
  const uint64_t term_b = (*b_elected)["term"];
  EXPECT_GT(term_b, term_a);
  EXPECT_GE(deposed_ms, kTtlMs / 3) << "B was elected before A's lease could have run out";
  EXPECT_TRUE(resource.write(key, term_b, 2, /*fenced=*/true).accepted);

  // A never read its stream: it still believes it leads, and writes with its old term.
  FencedRegister::Access stale = resource.write(key, term_a, 3, /*fenced=*/true);
  EXPECT_FALSE(stale.accepted) << "the resource accepted a deposed leader's write";
  EXPECT_EQ(static_cast<uint64_t>(stale.value), term_b) << "refused against B's term";
  EXPECT_EQ(resource.acceptedWrites(key), 2);
  const std::vector<std::string> violations = resource.check(key, /*fenced=*/true);
  EXPECT_TRUE(violations.empty()) << violations.front();
  // A's stream tells it, once its sidecar runs again.
  std::optional<json> end = a.nextNotRenewed(3 * kTtlMs);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ((*end)["event"], "lost") << end->dump();
  std::printf("[election-chaos] fencing: term %llu written, deposed after %lld ms, term %llu "
              "written, the deposed leader's write refused\n",
              static_cast<unsigned long long>(term_a), static_cast<long long>(deposed_ms),
              static_cast<unsigned long long>(term_b));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cluster.sidecar(i).stop(), 0) << cluster.sidecar(i).logs();
  }
}

}  // namespace
}  // namespace sidelock::testing::chaos
