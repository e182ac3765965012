// Read/write locks (issue 13): "mode": "shared" readers share a lock, a writer (the default,
// "exclusive") excludes everybody, a waiting writer turns new readers away on every sidecar, and
// each reader has its own lease, so a crashed reader blocks writers only until its TTL. Real
// sidecars on a real redis-server (and on Redlock nodes). Exclusion is checked by an observer of
// the clients' own grant-to-release intervals, never by the sidecar's counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/hold_check.h"
#include "support/http_client.h"
#include "support/lock_answers.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_group.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Two sidecars on one Redis, a client of each; both must stop cleanly.
class ReadWriteTwoSidecars : public TwoSidecarsOnOneRedis {};

TEST_F(ReadWriteTwoSidecars, ReadersShareAWriterExcludesEverybody) {
  auto r1 = ca.post("/v1/locks/doc/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(r1.status, 200) << r1.body;
  EXPECT_EQ(json::parse(r1.body)["mode"], "shared");
  EXPECT_EQ(json::parse(r1.body)["name"], "doc");
  auto r2 = cb.post("/v1/locks/doc/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_GT(json::parse(r2.body)["token"].get<uint64_t>(),
            json::parse(r1.body)["token"].get<uint64_t>())
      << "readers draw fencing tokens from the lock's counter";
  EXPECT_NE(ownerOf(r1), ownerOf(r2)) << "each reader has a lease of its own";

  auto state = ca.get("/v1/locks/doc");
  ASSERT_EQ(state.status, 200) << state.body;
  EXPECT_EQ(json::parse(state.body)["mode"], "shared");
  EXPECT_EQ(json::parse(state.body)["readers"], 2);
  EXPECT_EQ(state.body.find(ownerOf(r1)), std::string::npos) << "owners are never shown";

  // A writer (no mode: exclusive is the default) is turned away while readers hold the lock.
  auto w = cb.post("/v1/locks/doc/acquire", R"({"ttl_ms":20000})");
  EXPECT_EQ(w.status, 409) << w.body;
  EXPECT_GT(json::parse(w.body)["retry_after_ms"].get<int64_t>(), 10'000)
      << "the hint is the readers' remaining time";
  EXPECT_EQ(cb.post("/v1/locks/doc/acquire", R"({"mode":"exclusive"})").status, 409);
  // A writer's verbs do not work on a reader's lease, nor a reader's on none.
  EXPECT_EQ(cb.post("/v1/locks/doc/release", json{{"owner", "not-a-reader"}}.dump()).status, 409);
  EXPECT_EQ(
      cb.post("/v1/locks/doc/release", json{{"owner", "not-a-reader"}, {"mode", "shared"}}.dump())
          .status,
      404);

  // Readers extend and release their own leases: without a mode where they were granted, with
  // "mode": "shared" through another sidecar.
  auto ext =
      ca.post("/v1/locks/doc/extend", json{{"owner", ownerOf(r1)}, {"ttl_ms", 30000}}.dump());
  EXPECT_EQ(ext.status, 200) << ext.body;
  EXPECT_EQ(ca.post("/v1/locks/doc/release", json{{"owner", ownerOf(r1)}}.dump()).status, 200);
  EXPECT_EQ(json::parse(ca.get("/v1/locks/doc").body)["readers"], 1);
  EXPECT_EQ(ca.post("/v1/locks/doc/acquire", "{}").status, 409) << "one reader still holds it";
  auto rel2 =
      ca.post("/v1/locks/doc/release", json{{"owner", ownerOf(r2)}, {"mode", "shared"}}.dump());
  EXPECT_EQ(rel2.status, 200) << rel2.body;
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{doc}", "sidelock:{doc}:readers"}), "0")
      << "the last reader out frees the lock and leaves no keys";

  // A writer holds it now: readers are turned away, GET says exclusive.
  auto writer = ca.post("/v1/locks/doc/acquire", R"({"ttl_ms":20000})");
  ASSERT_EQ(writer.status, 200) << writer.body;
  EXPECT_FALSE(json::parse(writer.body).contains("mode"));
  EXPECT_GT(json::parse(writer.body)["token"].get<uint64_t>(),
            json::parse(r2.body)["token"].get<uint64_t>());
  EXPECT_EQ(cb.post("/v1/locks/doc/acquire", R"({"mode":"shared"})").status, 409);
  EXPECT_EQ(json::parse(cb.get("/v1/locks/doc").body)["mode"], "exclusive");
  EXPECT_EQ(ca.post("/v1/locks/doc/release", json{{"owner", ownerOf(writer)}}.dump()).status, 200);

  // Bad input is refused and changes nothing.
  for (const char* bad :
       {R"({"mode":"both"})", R"({"mode":1})", R"({"mode":"shared","reentrant":true})"}) {
    auto r = ca.post("/v1/locks/doc/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }
  EXPECT_EQ(ca.post("/v1/locks/doc/release", R"({"owner":"x","mode":"read"})").status, 400);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{doc}"}), "0") << "bad input changes nothing";
}

// A 409 says why (issue 22): a reader that holds a read lease already, a writer behind readers,
// and new readers turned away for a queued writer (not "held by another owner": nobody else may
// hold the lock at all).
TEST_F(ReadWriteTwoSidecars, RefusalsSayWhyTheLockIsNotGranted) {
  auto expectLocked = [](const HttpResponse& r, const std::string& reason,
                         const std::string& words) {
    EXPECT_EQ(r.status, 409) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j.value("error", ""), "locked") << r.body;
    EXPECT_EQ(j.value("reason", ""), reason) << r.body;
    EXPECT_NE(j.value("message", "").find(words), std::string::npos) << r.body;
  };
  auto reader = ca.post("/v1/locks/why/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(reader.status, 200) << reader.body;
  expectLocked(
      cb.post("/v1/locks/why/acquire", json{{"mode", "shared"}, {"owner", ownerOf(reader)}}.dump()),
      "held_by_you", "holds a read lease of the lock already");
  expectLocked(cb.post("/v1/locks/why/acquire", R"({"ttl_ms":20000})"), "held",
               "held by another owner");

  HttpClient queued = HttpClient::tcp(b->port());
  queued.sendRequest("POST", "/v1/locks/why/acquire", R"({"ttl_ms":20000,"wait_ms":10000})");
  HttpResponse turned;
  ASSERT_TRUE(pollUntil([&] {
    turned = ca.post("/v1/locks/why/acquire", R"({"mode":"shared"})");
    if (turned.status == 200) {  // before the writer queued: give it back at once
      ca.post("/v1/locks/why/release", json{{"owner", ownerOf(turned)}}.dump());
    }
    return turned.status == 409;
  })) << turned.body;
  expectLocked(turned, "writer_waiting", "a writer is waiting for the lock");
  EXPECT_EQ(turned.body.find("held by another owner"), std::string::npos) << turned.body;

  ASSERT_EQ(ca.post("/v1/locks/why/release", json{{"owner", ownerOf(reader)}}.dump()).status, 200);
  auto writer = queued.readResponse();
  ASSERT_TRUE(writer.has_value());
  ASSERT_EQ(writer->status, 200) << writer->body;
  EXPECT_EQ(cb.post("/v1/locks/why/release", json{{"owner", ownerOf(*writer)}}.dump()).status, 200);
}

// Many readers and writers on two sidecars: an observer of the clients' own intervals never sees
// a writer beside anybody, sees readers side by side, and every writer gets through although
// readers keep coming (a waiting writer keeps new readers out, on both sidecars).
TEST_F(ReadWriteTwoSidecars, ContentionAcrossTwoSidecarsKeepsWritersAlone) {
  constexpr int kReadersPerSidecar = 6;
  constexpr int kWritersPerSidecar = 2;
  constexpr int kRounds = 8;

  std::mutex mu;
  HoldLog holds;  // each client's grant-to-release interval
  std::atomic<int> failures{0};
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures++ == 0) first_failure = what;
  };
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  for (int i = 0; i < 2 * (kReadersPerSidecar + kWritersPerSidecar); ++i) {
    const int port = i % 2 == 0 ? a->port() : b->port();
    const bool writer = i / 2 < kWritersPerSidecar;
    clients.emplace_back([&, port, writer] {
      HttpClient c = HttpClient::tcp(port);
      const std::string body = writer ? R"({"ttl_ms":10000,"wait_ms":30000})"
                                      : R"({"mode":"shared","ttl_ms":10000,"wait_ms":30000})";
      for (int round = 0; round < kRounds; ++round) {
        auto r = c.post("/v1/locks/ledger/acquire", body);
        if (r.status != 200) {
          fail((writer ? "writer " : "reader ") + std::to_string(r.status) + " " + r.body);
          continue;
        }
        const auto granted = HoldLog::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(writer ? 2 : 8));
        holds.record("ledger", granted, HoldLog::now(),
                     writer ? HoldMode::kExclusive : HoldMode::kShared);
        auto rel = c.post("/v1/locks/ledger/release", json{{"owner", ownerOf(r)}}.dump());
        if (rel.status != 200) fail("release " + std::to_string(rel.status) + " " + rel.body);
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  ASSERT_EQ(holds.size(), 2u * (kReadersPerSidecar + kWritersPerSidecar) * kRounds);
  const ExclusionReport report = checkExclusion(holds.holds());
  EXPECT_TRUE(report.violations.empty())
      << "the observer saw a writer beside another holder: " << report.violations.front();
  EXPECT_GT(report.shared_overlaps, 0) << "readers held the lock side by side";
  std::cout << "[read_write] " << holds.size() << " holds on 2 sidecars in " << seconds << " s, "
            << report.shared_overlaps << " reader overlaps\n";
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{ledger}", "sidelock:{ledger}:readers"}), "0");
}

// Readers on one sidecar overlap without a gap (each new reader joins before the last leaves):
// without writer preference a writer on the other sidecar would never find the lock free. With
// it, the writer's mark keeps new readers out, the old ones drain, and the writer gets in.
TEST_F(ReadWriteTwoSidecars, AWaitingWriterIsNotStarvedByAStreamOfReaders) {
  auto& readers_side = a;
  auto& writer_side = b;
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> turned_away{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&, i] {
      HttpClient c = HttpClient::tcp(readers_side->port());
      std::this_thread::sleep_for(std::chrono::milliseconds(40 * i));  // staggered: no gaps
      while (!stop) {
        auto r = c.post("/v1/locks/report/acquire", R"({"mode":"shared","ttl_ms":5000})");
        if (r.status != 200) {
          ++turned_away;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        ++reads;
        std::this_thread::sleep_for(std::chrono::milliseconds(160));
        c.post("/v1/locks/report/release", json{{"owner", ownerOf(r)}}.dump());
      }
    });
  }
  // The readers stop however this test ends (a failed assertion must not leave them running).
  struct StopReaders {
    // A constructor, not aggregate parentheses: clang 14 has no C++20 paren-init of aggregates.
    StopReaders(std::atomic<bool>& s, std::vector<std::thread>& t) : stop(s), threads(t) {}
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~StopReaders() {
      stop = true;
      for (auto& t : threads) t.join();
    }
  };
  std::optional<StopReaders> stopper(std::in_place, stop, readers);
  ASSERT_TRUE(pollUntil([&] { return reads.load() >= 8; })) << "the readers got going";
  HttpClient w = HttpClient::tcp(writer_side->port());
  const auto t0 = Clock::now();
  auto writer = w.post("/v1/locks/report/acquire", R"({"ttl_ms":5000,"wait_ms":8000})");
  const int64_t waited_ms = msSince(t0);
  stopper.reset();
  ASSERT_EQ(writer.status, 200) << writer.body;
  EXPECT_LT(waited_ms, 6'000) << "the writer got in while readers kept coming";
  EXPECT_GT(turned_away.load(), 0) << "new readers were turned away for the waiting writer";
  std::cout << "[read_write] writer waited " << waited_ms << " ms behind a stream of "
            << reads.load() << " reads; " << turned_away.load() << " reads turned away\n";
  EXPECT_EQ(w.post("/v1/locks/report/release", json{{"owner", ownerOf(writer)}}.dump()).status,
            200);
}

// The last reader leaves on sidecar A, where another reader is queued; the writer is queued on
// sidecar B. A's queued reader hears the release first, but the writer's mark (a key of its own,
// outliving the readers) still turns it away: the writer gets in first.
TEST_F(ReadWriteTwoSidecars, AReaderQueuedOnAnotherSidecarDoesNotOvertakeTheWriter) {
  auto r1 = ca.post("/v1/locks/map/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(r1.status, 200) << r1.body;
  std::atomic<int64_t> writer_granted_ms{-1};
  std::atomic<int64_t> reader_granted_ms{-1};
  const auto t0 = Clock::now();
  std::thread writer([&] {
    HttpClient c = HttpClient::tcp(b->port());
    auto w = c.post("/v1/locks/map/acquire", R"({"ttl_ms":20000,"wait_ms":10000})");
    if (w.status != 200) return;
    writer_granted_ms = msSince(t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.post("/v1/locks/map/release", json{{"owner", ownerOf(w)}}.dump());
  });
  ASSERT_TRUE(pollUntil([&] {
    return redis.cli({"EXISTS", "sidelock:{map}:writer"}) == "1";
  })) << "the queued writer marked itself";
  std::thread reader([&] {
    HttpClient c = HttpClient::tcp(a->port());
    auto r = c.post("/v1/locks/map/acquire", R"({"mode":"shared","ttl_ms":20000,"wait_ms":10000})");
    if (r.status != 200) return;
    reader_granted_ms = msSince(t0);
    c.post("/v1/locks/map/release", json{{"owner", ownerOf(r)}}.dump());
  });
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(ca.get("/v1/locks").body)["waiters"].size() == 1;
  })) << "the second reader is queued on A";
  EXPECT_EQ(ca.post("/v1/locks/map/release", json{{"owner", ownerOf(r1)}}.dump()).status, 200);
  writer.join();
  reader.join();
  ASSERT_GE(writer_granted_ms.load(), 0);
  ASSERT_GE(reader_granted_ms.load(), 0);
  EXPECT_LT(writer_granted_ms.load(), reader_granted_ms.load()) << "the writer went first";
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{map}:writer"}), "0") << "the writer's mark is gone";
}

// Issue 22: a queued writer that leaves without the lock (its client hangs up, its wait_ms
// runs out) takes its mark with it: readers get in at once, not retry_max_ms + 1 s later (21 s
// here). A writer still queued on the same sidecar keeps them out until it leaves too.
TEST(ReadWriteTest, AWriterThatLeavesTakesItsMarkWithIt) {
  RedisServer redis;
  const std::string yaml = redisBackendYaml(redis.address()) + "locks:\n  retry_max_ms: 20000\n";
  SidecarProcess writers({yaml, {}, /*wait_ready=*/true});
  SidecarProcess readers({yaml, {}, /*wait_ready=*/true});
  HttpClient r = HttpClient::tcp(readers.port());
  auto first = r.post("/v1/locks/doc/acquire", R"({"mode":"shared","ttl_ms":30000})");
  ASSERT_EQ(first.status, 200) << first.body;
  auto markExists = [&] { return redis.cli({"EXISTS", "sidelock:{doc}:writer"}) == "1"; };
  auto readerTry = [&] {
    HttpClient c = HttpClient::tcp(readers.port());
    auto got = c.post("/v1/locks/doc/acquire", R"({"mode":"shared","ttl_ms":30000})");
    if (got.status == 200) c.post("/v1/locks/doc/release", json{{"owner", ownerOf(got)}}.dump());
    return got.status;
  };

  // A writer queued behind the reader marks itself; a reader queued meanwhile is turned away.
  HttpClient hanging = HttpClient::tcp(writers.port());
  hanging.sendRequest("POST", "/v1/locks/doc/acquire", R"({"ttl_ms":30000,"wait_ms":30000})");
  ASSERT_TRUE(pollUntil(markExists)) << "the queued writer marked itself";
  EXPECT_EQ(readerTry(), 409) << "the mark keeps new readers out";
  const auto t0 = Clock::now();
  std::atomic<int64_t> queued_reader_ms{-1};  // granted, since t0
  std::thread queued_reader([&] {
    HttpClient c = HttpClient::tcp(readers.port());
    auto got = c.request("POST", "/v1/locks/doc/acquire",
                         R"({"mode":"shared","ttl_ms":30000,"wait_ms":25000})", 30'000);
    if (got.status != 200) return;
    queued_reader_ms = msSince(t0);
    c.post("/v1/locks/doc/release", json{{"owner", ownerOf(got)}}.dump());
  });
  EXPECT_TRUE(pollUntil([&] {
    return json::parse(r.get("/v1/locks").body)["waiters"].size() == 1;
  })) << "the second reader waits on its sidecar";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its first try was turned away

  // The writer's client hangs up: the mark goes, the queued reader and a new one get in.
  const auto hung_up = Clock::now();
  const int64_t hung_up_ms = msSince(t0);
  hanging.close();
  const bool reader_in = pollUntil([&] { return readerTry() == 200; }, 3000);
  const int64_t new_reader_ms = msSince(hung_up);
  queued_reader.join();  // (before the fix: only when the 21 s mark ran out)
  ASSERT_TRUE(reader_in) << "a new reader still turned away 3 s after the writer left";
  EXPECT_LT(new_reader_ms, 1500);
  EXPECT_GE(queued_reader_ms.load(), hung_up_ms);
  EXPECT_LT(queued_reader_ms.load() - hung_up_ms, 1500)
      << "the reader queued behind the mark was told at once, not when the mark ran out";
  EXPECT_FALSE(markExists());
  std::cout << "[read_write] a new reader got in " << new_reader_ms
            << " ms after the queued writer hung up\n";

  // Two writers queued on one sidecar: the first hangs up, the second keeps readers out until
  // its own wait_ms runs out.
  HttpClient w1 = HttpClient::tcp(writers.port());
  w1.sendRequest("POST", "/v1/locks/doc/acquire", R"({"ttl_ms":30000,"wait_ms":30000})");
  ASSERT_TRUE(pollUntil(markExists)) << "readers hold the lock: the writer marked itself";
  std::atomic<int64_t> w2_status{0};
  std::thread w2([&] {
    HttpClient c = HttpClient::tcp(writers.port());
    w2_status = c.post("/v1/locks/doc/acquire", R"({"ttl_ms":30000,"wait_ms":2500})").status;
  });
  HttpClient wl = HttpClient::tcp(writers.port());
  EXPECT_TRUE(pollUntil([&] {
    const json waiters = json::parse(wl.get("/v1/locks").body)["waiters"];
    return waiters.size() == 1 && waiters[0]["waiters"] == 2;
  })) << "two writers queued on one sidecar";
  w1.close();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(readerTry(), 409) << "the writer still queued keeps readers out";
  EXPECT_TRUE(markExists());
  w2.join();
  EXPECT_EQ(w2_status.load(), 409) << "the second writer's wait ran out";
  const auto timed_out = Clock::now();
  ASSERT_TRUE(pollUntil([&] { return readerTry() == 200; }, 3000))
      << "a new reader still turned away after the last writer gave up";
  EXPECT_LT(msSince(timed_out), 1500);
  EXPECT_EQ(r.post("/v1/locks/doc/release", json{{"owner", ownerOf(first)}}.dump()).status, 200);
  EXPECT_EQ(writers.stop(), 0) << writers.logs();
  EXPECT_EQ(readers.stop(), 0) << readers.logs();
}

// A reader whose sidecar crashes (SIGKILL: nothing released) blocks the writer only until its
// own TTL, although another reader with a longer lease came and went. A reader's stream hold
// gives its lease back when the client hangs up.
TEST_F(ReadWriteTwoSidecars, ACrashedReaderExpiresAndAStreamReaderGivesBack) {
  auto& crashing = a;
  auto& other = b;
  HttpClient c = HttpClient::tcp(crashing->port());
  ASSERT_EQ(c.post("/v1/locks/cfg/acquire", R"({"mode":"shared","ttl_ms":800})").status, 200);
  HttpClient o = HttpClient::tcp(other->port());
  auto longer = o.post("/v1/locks/cfg/acquire", R"({"mode":"shared","ttl_ms":60000})");
  ASSERT_EQ(longer.status, 200) << longer.body;
  EXPECT_EQ(o.post("/v1/locks/cfg/release", json{{"owner", ownerOf(longer)}}.dump()).status, 200);
  crashing->kill();
  const auto t0 = Clock::now();
  auto writer = o.post("/v1/locks/cfg/acquire", R"({"ttl_ms":5000,"wait_ms":8000})");
  const int64_t waited_ms = msSince(t0);
  ASSERT_EQ(writer.status, 200) << writer.body;
  EXPECT_LT(waited_ms, 4000) << "the crashed reader's lease ended with its own TTL";
  EXPECT_EQ(o.post("/v1/locks/cfg/release", json{{"owner", ownerOf(writer)}}.dump()).status, 200);

  HttpClient stream = HttpClient::tcp(other->port());
  stream.sendRequest("POST", "/v1/locks/cfg/acquire",
                     R"({"mode":"shared","ttl_ms":2000,"hold":"stream"})");
  auto head = stream.readStreamHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(o.post("/v1/locks/cfg/acquire", "{}").status, 409);
  stream.close();
  ASSERT_TRUE(pollUntil([&] { return o.post("/v1/locks/cfg/acquire", "{}").status == 200; }))
      << "the stream reader's lease came back when its client left";
  EXPECT_EQ(other->stop(), 0) << other->logs();
}

// Redlock carries read/write locks over: a reader needs a majority of nodes where no writer
// holds the lock and a writer a majority where nobody does; two majorities share a node, so a
// reader and a writer can never both win.
TEST(ReadWriteTest, RedlockServesReadersAndWriters) {
  RedlockSidecar redlock(3);
  SidecarProcess& s = *redlock.sidecar;
  HttpClient c = HttpClient::tcp(s.port());
  auto r1 = c.post("/v1/locks/plan/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(r1.status, 200) << r1.body;
  auto r2 = c.post("/v1/locks/plan/acquire", R"({"mode":"shared","ttl_ms":20000})");
  ASSERT_EQ(r2.status, 200) << r2.body;
  // A Redlock grant needs a majority; the last node may answer a moment after the client did.
  auto nodesSaying = [&](const std::vector<std::string>& cmd, const std::string& answer) {
    int n = 0;
    for (auto& node : redlock.nodes) n += node->cli(cmd) == answer ? 1 : 0;
    return n;
  };
  EXPECT_GE(nodesSaying({"ZCARD", "sidelock:{plan}:readers"}, "2"), 2);
  auto state = json::parse(c.get("/v1/locks/plan").body);
  EXPECT_EQ(state["mode"], "shared");
  EXPECT_EQ(state["readers"], 2);
  EXPECT_EQ(c.post("/v1/locks/plan/acquire", "{}").status, 409);
  EXPECT_EQ(c.post("/v1/locks/plan/release", json{{"owner", ownerOf(r1)}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/locks/plan/extend", json{{"owner", ownerOf(r2)}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/locks/plan/release", json{{"owner", ownerOf(r2)}}.dump()).status, 200);
  auto writer = c.post("/v1/locks/plan/acquire", "{}");
  ASSERT_EQ(writer.status, 200) << writer.body;
  EXPECT_EQ(c.post("/v1/locks/plan/acquire", R"({"mode":"shared"})").status, 409);
  EXPECT_EQ(c.post("/v1/locks/plan/release", json{{"owner", ownerOf(writer)}}.dump()).status, 200);
  EXPECT_TRUE(pollUntil([&] { return nodesSaying({"EXISTS", "sidelock:{plan}"}, "0") == 3; }));
  EXPECT_EQ(s.stop(), 0) << s.logs();
}

}  // namespace
}  // namespace sidelock::testing
