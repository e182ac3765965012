// IdempotencyCache: a request id is claimed when its first request starts; retries that arrive
// meanwhile wait for its answer; answers are remembered within a window, bounded in count and in
// bytes (the oldest go first).
#include "api/idempotency_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace sidelock::api {
namespace {

using Kind = IdempotencyCache::Lookup::Kind;

/// A retry's connection: only whether it is still open matters to the cache.
class FakeResponder : public http::Responder {
 public:
  void send(int, std::string_view, std::string,
            std::vector<std::pair<std::string, std::string>>) override {}
  void startStream(int, std::string_view) override {}
  bool writeChunk(std::string_view) override { return false; }
  void endStream() override {}
  bool clientConnected() const override { return connected; }
  void onClientGone(std::function<void()>) override {}
  bool connected = true;
};

http::ResponderPtr responder() { return std::make_shared<FakeResponder>(); }

IdempotencyCache::Answer answer(std::string body) { return {200, std::move(body), {}, "", 0}; }

/// Claims `key` and finishes it with `body` at `now_us`.
void remember(IdempotencyCache& cache, const std::string& key, const std::string& body,
              int64_t now_us) {
  auto claim = cache.begin(key, responder(), now_us);
  ASSERT_EQ(claim.kind, Kind::kRun);
  const auto a = answer(body);
  cache.finish(key, claim.id, &a, now_us);
}

TEST(IdempotencyCacheTest, RemembersWithinTheWindowPerRouteNameAndId) {
  IdempotencyCache cache(/*window_ms=*/1000, /*max_entries=*/10, /*max_bytes=*/1 << 20);
  const std::string key = IdempotencyCache::keyOf("acquire", "orders-1", "r1");
  remember(cache, key, "grant", 0);
  auto hit = cache.begin(key, responder(), 999'000);
  ASSERT_EQ(hit.kind, Kind::kReplay);
  EXPECT_EQ(hit.answer->body, "grant");
  EXPECT_EQ(cache.begin(IdempotencyCache::keyOf("release", "orders-1", "r1"), responder(), 0).kind,
            Kind::kRun)
      << "another route";
  EXPECT_EQ(cache.begin(IdempotencyCache::keyOf("acquire", "orders-2", "r1"), responder(), 0).kind,
            Kind::kRun)
      << "another lock";
  cache.forget(key, hit.id);
  EXPECT_EQ(cache.begin(key, responder(), 999'000).kind, Kind::kRun) << "forgotten";
}

// A grant whose first answer went unread is given back unless a retry was handed it meanwhile:
// the cache tells which answers were replayed (review finding: an auto_renew grant replayed to a
// retry during the unread-answer watch was then given back under it).
TEST(IdempotencyCacheTest, TellsWhetherAnAnswerWasHandedToARetry) {
  IdempotencyCache cache(1000, 10, 1 << 20);
  const std::string key = IdempotencyCache::keyOf("acquire", "x", "r");
  auto claim = cache.begin(key, responder(), 0);
  ASSERT_EQ(claim.kind, Kind::kRun);
  const auto a = answer("grant");
  cache.finish(key, claim.id, &a, 0);
  EXPECT_FALSE(cache.replayed(key, claim.id));
  ASSERT_EQ(cache.begin(key, responder(), 1000).kind, Kind::kReplay);
  EXPECT_TRUE(cache.replayed(key, claim.id));
  EXPECT_FALSE(cache.replayed(key, claim.id + 1)) << "another claim of the key";
  EXPECT_FALSE(cache.replayed(IdempotencyCache::keyOf("acquire", "y", "r"), claim.id));
}

TEST(IdempotencyCacheTest, ExpiredAnswersAreDroppedAndTheirKeyIsFree) {
  IdempotencyCache cache(1000, 10, 1 << 20);
  const std::string key = IdempotencyCache::keyOf("acquire", "x", "r");
  remember(cache, key, "grant", 0);
  EXPECT_EQ(cache.nextExpiryUs(), 1'000'000);
  cache.sweep(1'000'000);
  EXPECT_EQ(cache.size(), 0u) << "expired entries are dropped";
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.nextExpiryUs(), 0);
  EXPECT_EQ(cache.begin(key, responder(), 1'000'000).kind, Kind::kRun) << "window over";
}

TEST(IdempotencyCacheTest, ARetryWhileTheFirstRunsWaitsForItsAnswer) {
  IdempotencyCache cache(60'000, 10, 1 << 20);
  const std::string key = IdempotencyCache::keyOf("release", "lock", "once");
  auto first = cache.begin(key, responder(), 0);
  ASSERT_EQ(first.kind, Kind::kRun);
  auto retry = std::make_shared<FakeResponder>();
  EXPECT_EQ(cache.begin(key, retry, 1).kind, Kind::kAttached) << "never a second run";
  EXPECT_EQ(cache.begin(key, responder(), 2).kind, Kind::kAttached);
  const auto a = answer("released");
  auto retries = cache.finish(key, first.id, &a, 3);
  ASSERT_EQ(retries.size(), 2u) << "both copies get the first answer";
  EXPECT_EQ(retries[0], retry);
  EXPECT_EQ(cache.finish(key, first.id, &a, 4).size(), 0u) << "a claim ends once";
  EXPECT_EQ(cache.begin(key, responder(), 5).kind, Kind::kReplay) << "and is remembered";
}

// A request id names one request: another request under it (its fields' fingerprint differs) is
// refused while the first runs and after it answered, and changes nothing for the first.
TEST(IdempotencyCacheTest, AnotherRequestUnderTheSameIdIsAMismatch) {
  IdempotencyCache cache(60'000, 10, 1 << 20);
  const std::string key = IdempotencyCache::keyOf("acquire", "lock", "r");
  auto first = cache.begin(key, responder(), 0, /*fingerprint=*/11);
  ASSERT_EQ(first.kind, Kind::kRun);
  EXPECT_EQ(cache.begin(key, responder(), 1, 12).kind, Kind::kMismatch) << "while it runs";
  auto copy = cache.begin(key, responder(), 2, 11);
  EXPECT_EQ(copy.kind, Kind::kAttached);
  const auto a = answer("grant");
  EXPECT_EQ(cache.finish(key, first.id, &a, 3).size(), 1u) << "only the true copy is attached";
  EXPECT_EQ(cache.begin(key, responder(), 4, 12).kind, Kind::kMismatch) << "once answered";
  EXPECT_FALSE(cache.replayed(key, first.id));
  auto replay = cache.begin(key, responder(), 5, 11);
  ASSERT_EQ(replay.kind, Kind::kReplay);
  EXPECT_EQ(replay.answer->body, "grant");
}

TEST(IdempotencyCacheTest, AnUnrememberedAnswerFreesTheKey) {
  IdempotencyCache cache(60'000, 10, 1 << 20);
  const std::string key = IdempotencyCache::keyOf("acquire", "x", "r");
  auto first = cache.begin(key, responder(), 0);
  auto gone = std::make_shared<FakeResponder>();
  ASSERT_EQ(cache.begin(key, gone, 1).kind, Kind::kAttached);
  gone->connected = false;
  ASSERT_EQ(cache.begin(key, responder(), 1).kind, Kind::kAttached);
  EXPECT_EQ(cache.finish(key, first.id, nullptr, 2).size(), 1u)
      << "the retry that hung up was dropped when the next one came";
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.begin(key, responder(), 3).kind, Kind::kRun) << "a backend error: run again";
}

TEST(IdempotencyCacheTest, KeepsAtMostMaxEntriesDroppingTheOldest) {
  IdempotencyCache cache(60'000, 3, 1 << 20);
  auto key = [](int i) { return IdempotencyCache::keyOf("release", "x", std::to_string(i)); };
  for (int i = 0; i < 5; ++i) remember(cache, key(i), "", i);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.begin(key(4), responder(), 10).kind, Kind::kReplay);
  EXPECT_EQ(cache.begin(key(0), responder(), 10).kind, Kind::kRun) << "the oldest went first";
}

TEST(IdempotencyCacheTest, KeepsAtMostMaxBytesDroppingTheOldest) {
  const std::string long_id(128, 'r');
  const std::string scope = std::string(200, 'n') + '\0' + std::string(128, 'o') + '\0';
  const std::string body(400, 'g');
  auto key = [&](int i) {
    return IdempotencyCache::keyOf("acquire", scope, long_id + std::to_string(i));
  };
  const size_t max_bytes = 64 << 10;
  IdempotencyCache cache(600'000, 100'000, max_bytes);
  for (int i = 0; i < 1000; ++i) {
    remember(cache, key(i), body, i);
    ASSERT_LE(cache.bytes(), max_bytes) << "after " << i + 1 << " answers";
  }
  // Each answer costs its key twice, its body and the overhead: about 1.3 KiB, so ~50 fit.
  EXPECT_GT(cache.size(), 30u);
  EXPECT_LT(cache.size(), 64u);
  EXPECT_GE(cache.bytes(), cache.size() * (2 * key(0).size() + body.size()));
  EXPECT_EQ(cache.begin(key(999), responder(), 2000).kind, Kind::kReplay) << "the newest stay";
  EXPECT_EQ(cache.begin(key(0), responder(), 2000).kind, Kind::kRun) << "the oldest went";
}

TEST(IdempotencyCacheTest, ClaimsInFlightAreNeverDropped) {
  IdempotencyCache cache(60'000, 2, 1 << 20);
  auto key = [](int i) { return IdempotencyCache::keyOf("acquire", "x", std::to_string(i)); };
  std::vector<IdempotencyCache::Id> claims;
  for (int i = 0; i < 4; ++i) claims.push_back(cache.begin(key(i), responder(), i).id);
  EXPECT_EQ(cache.size(), 4u) << "over max_entries, but every claim waits for its answer";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(cache.begin(key(i), responder(), 5).kind, Kind::kAttached);
  const auto a = answer("x");
  for (int i = 0; i < 4; ++i) cache.finish(key(i), claims[i], &a, 6);
  EXPECT_EQ(cache.size(), 2u) << "answered, the oldest go";
}

TEST(IdempotencyCacheTest, GivesItsBucketsBackWhenItEmpties) {
  IdempotencyCache cache(1000, 100'000, 64 << 20);
  for (int i = 0; i < 20'000; ++i)
    remember(cache, IdempotencyCache::keyOf("acquire", "x", std::to_string(i)), "grant", 0);
  const size_t full_bytes = cache.bytes();
  EXPECT_GT(full_bytes, 20'000u * IdempotencyCache::kEntryOverheadBytes);
  cache.sweep(1'000'000);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_LT(cache.bucketCount(), 100u) << "the bucket array of 20,000 entries is gone";
}

TEST(IdempotencyCacheTest, WindowZeroOrNoBytesRemembersNothing) {
  for (IdempotencyCache cache : {IdempotencyCache(0, 10, 1 << 20), IdempotencyCache(1000, 10, 0)}) {
    const std::string key = IdempotencyCache::keyOf("acquire", "x", "r");
    EXPECT_EQ(cache.begin(key, responder(), 0).kind, Kind::kOff);
    EXPECT_EQ(cache.begin(key, responder(), 0).kind, Kind::kOff) << "no claim either";
    EXPECT_EQ(cache.size(), 0u);
  }
}

}  // namespace
}  // namespace sidelock::api
