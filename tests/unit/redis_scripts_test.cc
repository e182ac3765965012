// Pure logic of the redis layer: key and channel names, reply decoding, reconnect backoff.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "redis/redis_node.h"
#include "redis/scripts.h"
#include "redis_value_builders.h"

namespace sidelock::backend {
namespace {

TEST(RedisKeys, PrefixAndHashTag) {
  EXPECT_EQ(lockKey("sidelock:", "orders-42"), "sidelock:{orders-42}");
  EXPECT_EQ(tokenKey("sidelock:", "orders-42"), "sidelock:{orders-42}:token");
  EXPECT_EQ(releaseChannel("sidelock:", "orders-42"), "sidelock:released:{orders-42}");
  std::string name;
  ASSERT_TRUE(lockNameFromChannel("sidelock:", "sidelock:released:{orders-42}", &name));
  EXPECT_EQ(name, "orders-42");
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "other:released:{x}", &name));
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "sidelock:released:{x", &name));
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "sidelock:", &name));
  // A lock key ends with '}', a counter key with ":token": no name's lock key is another's counter.
  EXPECT_NE(lockKey("p:", "a}:token"), tokenKey("p:", "a"));
}

TEST(RedisScripts, EveryScriptHasText) {
  for (ScriptId id : kAllScripts) {
    EXPECT_FALSE(scriptText(id).empty()) << scriptName(id);
  }
}

StatusOr<Outcome> decode(const StatusOr<RedisValue>& v, ScriptId script) {
  return decodeOutcome(v, script, "n1");
}

RedisValue reply(int64_t code, int64_t token, int64_t ttl) {
  return array({integer(code), integer(token), integer(ttl)});
}
RedisValue reply(int64_t code, int64_t token, int64_t ttl, int64_t holds) {
  return array({integer(code), integer(token), integer(ttl), integer(holds)});
}

// A held inspect of readers or a semaphore ends with its leases' holders (lease_labels.lua):
// "<since_ms> <ttl_ms> <label>" each; anything else there is a bad reply.
TEST(RedisReplies, LeaseHolders) {
  auto readers = decode(array({integer(1), integer(7), integer(900), integer(2),
                               array({str("1795585337668 400 pod a"), str("5 900 b")})}),
                        ScriptId::kSharedInspect);
  ASSERT_TRUE(readers.isOk());
  EXPECT_EQ(readers->used, 2);
  ASSERT_EQ(readers->holders.size(), 2u);
  EXPECT_EQ(readers->holders[0].holder, "pod a");
  EXPECT_EQ(readers->holders[0].since_ms, 1795585337668);
  EXPECT_EQ(readers->holders[0].ttl_ms, 400);
  EXPECT_EQ(readers->holders[1].holder, "b");
  auto permits = decode(array({integer(1), integer(7), integer(0), integer(1), integer(3),
                               array({str("5 900 p")})}),
                        ScriptId::kSemInspect);
  ASSERT_TRUE(permits.isOk());
  EXPECT_EQ(permits->limit, 3);
  ASSERT_EQ(permits->holders.size(), 1u);
  EXPECT_EQ(permits->holders[0].ttl_ms, 900);
  auto none = decode(array({integer(1), integer(7), integer(0), integer(1), integer(3), array({})}),
                     ScriptId::kSemInspect);
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->holders.empty());
  for (const char* bad : {"", "5", "5 900", "5 900 ", "5 x p", "x 900 p"}) {
    const RedisValue v =
        array({integer(1), integer(7), integer(900), integer(2), array({str(bad)})});
    EXPECT_FALSE(decode(v, ScriptId::kSharedInspect).isOk()) << bad;
  }
  EXPECT_FALSE(decode(array({integer(1), integer(7), integer(900), array({str("5 9 p")})}),
                      ScriptId::kInspect)
                   .isOk())
      << "only readers and semaphores list holders";
}

// A busy or held reply may end with the holder record "<since_ms> <label>" (holder_record.lua).
TEST(RedisReplies, HolderRecord) {
  auto busy = decode(array({integer(0), integer(0), integer(900), str("1795585337668 pod a")}),
                     ScriptId::kAcquire);
  ASSERT_TRUE(busy.isOk());
  EXPECT_EQ(busy->code, OutcomeCode::kBusy);
  EXPECT_EQ(busy->holder, "pod a");
  EXPECT_EQ(busy->since_ms, 1795585337668);
  EXPECT_EQ(busy->holder_ttl_ms, 900);
  auto held = decode(array({integer(1), integer(7), integer(900), str("5 w")}), ScriptId::kInspect);
  ASSERT_TRUE(held.isOk());
  EXPECT_EQ(held->holder, "w");
  auto writer = decode(array({integer(1), integer(7), integer(900), integer(0), str("5 w")}),
                       ScriptId::kSharedInspect);
  ASSERT_TRUE(writer.isOk());
  EXPECT_EQ(writer->holder, "w");
  EXPECT_EQ(writer->used, 0);
  for (const char* bad : {"", "5", "5 ", " w", "x w", "99999999999999999999 w"}) {
    EXPECT_FALSE(
        decode(array({integer(1), integer(7), integer(900), str(bad)}), ScriptId::kInspect).isOk())
        << bad;
  }
  EXPECT_EQ(holderRecordKey("sidelock:", "o"), "sidelock:{o}:holder") << "the lease's slot";
}

TEST(RedisReplies, Acquire) {
  auto granted = decode(reply(1, 7, 5000, 1), ScriptId::kAcquire);
  ASSERT_TRUE(granted.isOk());
  EXPECT_TRUE(granted->ok());
  EXPECT_EQ(granted->token, 7u);
  EXPECT_EQ(granted->validity_ms, 5000);
  EXPECT_EQ(granted->holds, 1);
  auto reentered = decode(reply(1, 7, 9000, 3), ScriptId::kAcquire);
  EXPECT_EQ(reentered->holds, 3);
  EXPECT_FALSE(decode(reply(1, 7, 5000), ScriptId::kAcquire).isOk()) << "a grant counts holds";
  // A counter seeded from Redis TIME in microseconds: well above 2^32, exact below 2^53.
  auto seeded = decode(reply(1, 1'795'376'077'464'695, 5000, 1), ScriptId::kAcquire);
  ASSERT_TRUE(seeded.isOk());
  EXPECT_EQ(seeded->token, 1'795'376'077'464'695u);
  EXPECT_FALSE(decode(reply(1, 0, 5000, 1), ScriptId::kAcquire).isOk())
      << "a grant always carries a token";

  auto busy = decode(reply(0, 0, 1234), ScriptId::kAcquire);
  ASSERT_TRUE(busy.isOk());
  EXPECT_EQ(busy->code, OutcomeCode::kBusy);
  EXPECT_EQ(busy->holder_ttl_ms, 1234);
  EXPECT_EQ(decode(reply(0, 0, -1), ScriptId::kAcquire)->holder_ttl_ms, -1);
  EXPECT_FALSE(busy->writer_marked);
  auto marked = decode(reply(0, 0, 1234, 1), ScriptId::kAcquire);
  ASSERT_TRUE(marked.isOk());
  EXPECT_EQ(marked->code, OutcomeCode::kBusy);
  EXPECT_TRUE(marked->writer_marked) << "readers turned the queued writer away: it is marked";
  EXPECT_EQ(marked->holds, 0);

  auto err = decode(error("WRONGTYPE bad"), ScriptId::kAcquire);
  ASSERT_FALSE(err.isOk());
  EXPECT_EQ(err.status().code(), StatusCode::kInternal);
  EXPECT_NE(err.status().message().find("WRONGTYPE"), std::string::npos);
  EXPECT_NE(err.status().message().find("n1"), std::string::npos);
  auto down = decode(StatusOr<RedisValue>(unavailable("down")), ScriptId::kAcquire);
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
}

// One contract for every script: anything but three integers with a known code is refused, and
// the message names the script.
TEST(RedisReplies, EveryScriptSharesOneShape) {
  for (ScriptId id : kAllScripts) {
    if (id == ScriptId::kAcquireAll) {  // a multi-lock's reply of its own (below)
      EXPECT_FALSE(decode(reply(1, 2, 3), id).isOk());
      continue;
    }
    // An election's campaign is never answered "not held" (it grants or is busy).
    if (id != ScriptId::kElectionCampaign) {
      EXPECT_TRUE(decode(reply(-1, 0, 0), id).isOk()) << scriptName(id);
    }
    EXPECT_FALSE(decode(array({integer(1)}), id).isOk()) << scriptName(id);
    // Mutex scripts answer up to 4 fields, semaphore scripts up to 5 (used, limit), election
    // scripts up to 6 (inspect: the leader's record).
    const bool leader_shape = scriptSource(id).reply == ScriptReply::kLeader;
    std::vector<RedisValue> too_long(isSemaphoreScript(id) ? 6 : leader_shape ? 7 : 5, integer(1));
    EXPECT_FALSE(decode(array(too_long), id).isOk()) << scriptName(id);
    EXPECT_FALSE(decode(reply(1, 2, 3, -1), id).isOk()) << scriptName(id);
    EXPECT_FALSE(decode(array({integer(1), str("2"), integer(3)}), id).isOk());
    EXPECT_FALSE(decode(integer(1), id).isOk()) << scriptName(id);
    EXPECT_FALSE(decode(str("x"), id).isOk()) << scriptName(id);
    auto bad = decode(reply(id == ScriptId::kSemAcquire ? 3 : 2, 0, 0), id);
    ASSERT_FALSE(bad.isOk());
    EXPECT_NE(bad.status().message().find(scriptName(id)), std::string::npos);
  }
  // A semaphore's own answers: limit mismatch (acquire only), used and limit.
  auto mismatch = decode(array({integer(2), integer(0), integer(0), integer(3), integer(5)}),
                         ScriptId::kSemAcquire);
  ASSERT_TRUE(mismatch.isOk());
  EXPECT_EQ(mismatch->code, OutcomeCode::kLimitMismatch);
  EXPECT_EQ(mismatch->limit, 5);
  EXPECT_FALSE(decode(reply(2, 0, 0), ScriptId::kSemRelease).isOk());
  auto permit = decode(array({integer(1), integer(9), integer(500), integer(2), integer(3)}),
                       ScriptId::kSemAcquire);
  EXPECT_EQ(permit->used, 2);
  EXPECT_EQ(permit->limit, 3);
  EXPECT_EQ(permit->holds, 0) << "used is not a hold count";
  EXPECT_FALSE(decode(reply(1, 0, 500), ScriptId::kSemAcquire).isOk()) << "a permit has a token";
  // Readers: the 4th field counts them (not holds); only acquire can be turned away.
  auto reader = decode(reply(1, 9, 500, 3), ScriptId::kSharedAcquire);
  ASSERT_TRUE(reader.isOk());
  EXPECT_EQ(reader->used, 3);
  EXPECT_EQ(reader->holds, 0);
  auto turned_away = decode(reply(0, 0, 800, 2), ScriptId::kSharedAcquire);
  ASSERT_TRUE(turned_away.isOk());
  EXPECT_EQ(turned_away->code, OutcomeCode::kBusy);
  EXPECT_EQ(turned_away->holder_ttl_ms, 800);
  EXPECT_FALSE(decode(reply(0, 0, 5), ScriptId::kSharedRelease).isOk());
  EXPECT_FALSE(decode(reply(1, 0, 500), ScriptId::kSharedAcquire).isOk()) << "a reader has a token";
  // "Held by another owner" has no meaning for reads and the operator's delete.
  EXPECT_FALSE(decode(reply(0, 0, 5), ScriptId::kInspect).isOk());
  EXPECT_FALSE(decode(reply(0, 0, 5), ScriptId::kForceRelease).isOk());
}

TEST(RedisReplies, BusyAnswersSayWhy) {
  EXPECT_EQ(decode(reply(0, 0, 900), ScriptId::kAcquire)->busy_reason, BusyReason::kHeld);
  auto mine = decode(reply(3, 0, 900), ScriptId::kAcquire);
  ASSERT_TRUE(mine.isOk());
  EXPECT_EQ(mine->code, OutcomeCode::kBusy);
  EXPECT_EQ(mine->busy_reason, BusyReason::kHeldByYou);
  EXPECT_EQ(mine->holder_ttl_ms, 900);
  EXPECT_EQ(decode(reply(3, 0, 900), ScriptId::kFairAcquire)->busy_reason, BusyReason::kHeldByYou);
  EXPECT_EQ(decode(reply(3, 0, 900, 2), ScriptId::kSharedAcquire)->busy_reason,
            BusyReason::kHeldByYou);
  auto writer = decode(reply(4, 0, 700, 2), ScriptId::kSharedAcquire);
  ASSERT_TRUE(writer.isOk());
  EXPECT_EQ(writer->code, OutcomeCode::kBusy);
  EXPECT_EQ(writer->busy_reason, BusyReason::kWriterWaiting);
  EXPECT_EQ(writer->holder_ttl_ms, 700);
  // Only acquires are refused with a reason; a writer's mark only turns readers away.
  EXPECT_FALSE(decode(reply(4, 0, 700), ScriptId::kAcquire).isOk());
  EXPECT_FALSE(decode(reply(3, 0, 700), ScriptId::kRelease).isOk());
  EXPECT_FALSE(decode(reply(3, 0, 700), ScriptId::kExtend).isOk());
}

TEST(RedisReplies, ErrorRepliesKeepTheScriptsShaAndLinesOut) {
  const std::string sha = "2a3b8f1e0c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f";
  // Redis 7 at maxmemory (noeviction): the script's first write is refused.
  auto oom = decode(error("OOM command not allowed when used memory > 'maxmemory'. script: " + sha +
                          ", on @user_script:9."),
                    ScriptId::kAcquire);
  ASSERT_FALSE(oom.isOk());
  EXPECT_EQ(oom.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(oom.status().message(),
            "redis n1 is out of memory (maxmemory reached): OOM command not allowed when used "
            "memory > 'maxmemory'. Nothing was written; free memory on Redis or raise its "
            "maxmemory");
  // Redis 6 puts the SHA and lines in front.
  auto oom6 = decodeAllOutcome(error("ERR Error running script (call to f_" + sha +
                                     "): @user_script:9: @user_script: 9: -OOM command not "
                                     "allowed when used memory > 'maxmemory'. "),
                               2, "n1");
  ASSERT_FALSE(oom6.isOk());
  EXPECT_EQ(oom6.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(oom6.status().message().find(sha), std::string::npos) << oom6.status().message();
  EXPECT_EQ(oom6.status().message().find("user_script"), std::string::npos);
  // Other errors stay kInternal, in Redis's words without the script's.
  auto noperm = decode(error("NOPERM this user has no permissions to access one of the keys used "
                             "as arguments script: " +
                             sha + ", on @user_script:4."),
                       ScriptId::kRelease);
  EXPECT_EQ(noperm.status().code(), StatusCode::kInternal);
  EXPECT_EQ(noperm.status().message(),
            "redis n1: NOPERM this user has no permissions to access one of the keys used as "
            "arguments");
  EXPECT_EQ(clientVisibleRedisError("ERR user_script:12: Attempt to compare nil with number "
                                    "script: " +
                                    sha + ", on @user_script:12."),
            "ERR Attempt to compare nil with number");
  // (The Sentinel backend tells a demoted master by ": READONLY ".)
  EXPECT_EQ(decode(error("READONLY You can't write against a read only replica. script: " + sha +
                         ", on @user_script:1."),
                   ScriptId::kAcquire)
                .status()
                .message(),
            "redis n1: READONLY You can't write against a read only replica.");
  // Text that only looks like it is left alone.
  EXPECT_EQ(clientVisibleRedisError("ERR script: not-a-sha"), "ERR script: not-a-sha");
}

TEST(RedisReplies, AcquireAll) {
  auto granted = decodeAllOutcome(
      array({integer(1), integer(0), integer(900), integer(11), integer(12)}), 2, "n1");
  ASSERT_TRUE(granted.isOk());
  EXPECT_TRUE(granted->granted);
  EXPECT_EQ(granted->tokens, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(granted->validity_ms, 900);
  auto busy = decodeAllOutcome(reply(0, 0, 700, 2), 3, "n1");
  ASSERT_TRUE(busy.isOk());
  EXPECT_FALSE(busy->granted);
  EXPECT_EQ(busy->busy_index, 1u) << "1-based in the reply";
  EXPECT_EQ(busy->holder_ttl_ms, 700);
  EXPECT_FALSE(
      decodeAllOutcome(array({integer(1), integer(0), integer(900), integer(11)}), 2, "n1").isOk())
      << "a token per name";
  EXPECT_FALSE(decodeAllOutcome(reply(0, 0, 700, 4), 3, "n1").isOk()) << "index out of range";
  EXPECT_FALSE(decodeAllOutcome(reply(0, 0, 700, 0), 3, "n1").isOk());
  EXPECT_FALSE(
      decodeAllOutcome(array({integer(1), integer(0), integer(9), integer(0)}), 1, "n1").isOk())
      << "tokens are positive";
}

TEST(RedisScripts, TokenCounterOutlivesTheLongestLeaseByTheMargin) {
  EXPECT_EQ(tokenCounterTtlMs(600'000), 600'000 + kTokenCounterMarginMs);
  EXPECT_EQ(tokenCounterTtlMs(0), kTokenCounterMarginMs);
  EXPECT_FALSE(scriptText(ScriptId::kTokenSync).empty());
}

TEST(RedisReplies, ReleaseExtendAndHandOff) {
  EXPECT_EQ(decode(reply(1, 0, 0), ScriptId::kRelease)->code, OutcomeCode::kOk);
  auto other = decode(reply(0, 0, 700), ScriptId::kRelease);
  EXPECT_EQ(other->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(other->holder_ttl_ms, 700);
  EXPECT_EQ(decode(reply(-1, 0, 0), ScriptId::kRelease)->code, OutcomeCode::kNotHeld);

  auto ok = decode(reply(1, 0, 900), ScriptId::kExtend);
  EXPECT_EQ(ok->code, OutcomeCode::kOk);
  EXPECT_EQ(ok->validity_ms, 900);
  EXPECT_EQ(decode(reply(0, 0, 5), ScriptId::kExtend)->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(decode(reply(-1, 0, 0), ScriptId::kExtend)->code, OutcomeCode::kNotHeld);
  auto timeout = decode(StatusOr<RedisValue>(deadlineExceeded("slow")), ScriptId::kExtend);
  EXPECT_EQ(timeout.status().code(), StatusCode::kDeadlineExceeded);

  auto handed = decode(reply(1, 43, 20'000, 1), ScriptId::kReleaseGrant);
  EXPECT_TRUE(handed->ok());
  EXPECT_EQ(handed->token, 43u);
  EXPECT_EQ(handed->validity_ms, 20'000);
  EXPECT_FALSE(decode(reply(1, 0, 20'000), ScriptId::kReleaseGrant).isOk())
      << "a hand-off grants (a token) or gives back a hold (holds left)";
  auto one_hold = decode(reply(1, 0, 9'000, 2), ScriptId::kReleaseGrant);
  EXPECT_TRUE(one_hold->ok());
  EXPECT_EQ(one_hold->token, 0u);
  EXPECT_EQ(one_hold->holds, 2);
  auto left = decode(reply(1, 0, 9'000, 1), ScriptId::kRelease);
  EXPECT_EQ(left->holds, 1) << "a release of a re-entered lease says how many holds are left";
  EXPECT_EQ(decode(reply(0, 0, 5), ScriptId::kReleaseGrant)->code, OutcomeCode::kNotOwner);
}

TEST(RedisReplies, InspectAndForceRelease) {
  auto held = decode(reply(1, 12, 800), ScriptId::kInspect);
  ASSERT_TRUE(held.isOk());
  EXPECT_TRUE(held->ok());
  EXPECT_EQ(held->validity_ms, 800);
  EXPECT_EQ(held->token, 12u);
  auto never = decode(reply(-1, 0, 0), ScriptId::kInspect);
  EXPECT_EQ(never->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(never->token, 0u);
  auto freed = decode(reply(1, 12, 0), ScriptId::kForceRelease);
  EXPECT_TRUE(freed->ok());
  EXPECT_EQ(freed->token, 12u);
  auto nothing = decode(reply(-1, 12, 0), ScriptId::kForceRelease);
  EXPECT_EQ(nothing->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(nothing->token, 12u) << "the last token, held or not";
}

// scriptCallFor() of a verb a script serves for its kind.
ScriptCall callOf(const Operation& op, const ScriptContext& ctx) {
  StatusOr<ScriptCall> call = scriptCallFor(op, ctx);
  EXPECT_TRUE(call.isOk()) << call.status().toString();
  return call.isOk() ? *call : ScriptCall{};
}

// Every verb becomes exactly one script with the keys of its lock.
TEST(RedisScripts, EveryOperationIsOneScriptCall) {
  const ScriptContext ctx{"p:", "61000", false};
  const ScriptCall acquire = callOf(Operation::acquire("n", "o", 5000), ctx);
  EXPECT_EQ(acquire.script, ScriptId::kAcquire);
  ASSERT_EQ(acquire.key_count, 4);
  EXPECT_EQ(acquire.keys[0], "p:{n}");
  EXPECT_EQ(acquire.keys[1], "p:{n}:token");
  EXPECT_EQ(acquire.keys[2], "p:{n}:holder") << "the holder record";
  EXPECT_EQ(acquire.keys[3], "p:{n}:delay") << "the lock-delay key, always the last key";
  ASSERT_EQ(acquire.arg_count, 9);
  EXPECT_EQ(acquire.args[0], "o");
  EXPECT_EQ(acquire.args[1], "5000");
  EXPECT_EQ(acquire.args[2], "61000 us") << "the counter's TTL, floored by the microsecond";
  EXPECT_EQ(acquire.args[3], "") << "no holder label";
  EXPECT_EQ(acquire.args[4], kNotReentrantArg);
  EXPECT_EQ(acquire.args[5], "0") << "not a queued writer";
  EXPECT_EQ(acquire.args[6], "0") << "no lock-delay";
  EXPECT_EQ(acquire.args[7], "p:released:{n}") << "a grant is announced";
  EXPECT_EQ(acquire.args[8], announcement::kGranted);
  Operation labelled = Operation::acquire("n", "o", 5000, true);
  labelled.holder = "pod a";
  const ScriptCall reentrant = callOf(labelled, ctx);
  ASSERT_EQ(reentrant.arg_count, 9);
  EXPECT_EQ(reentrant.args[3], "pod a");
  EXPECT_EQ(reentrant.args[4], kReentrantArg);
  // lock_delay_ms is ARGV[7] (0: none), before the announcement's channel and reason; a release
  // may give the lease up involuntarily (ARGV[5], after "-" for "not sharded").
  Operation delayed = Operation::acquire("n", "o", 5000);
  delayed.lock_delay_ms = 1500;
  const ScriptCall with_delay = callOf(delayed, ctx);
  ASSERT_EQ(with_delay.arg_count, 9);
  EXPECT_EQ(with_delay.args[4], kNotReentrantArg);
  EXPECT_EQ(with_delay.args[5], "0") << "no writer wait";
  EXPECT_EQ(with_delay.args[6], "1500");
  EXPECT_EQ(with_delay.args[8], announcement::kGranted);
  Operation lost = Operation::release("n", "o");
  lost.involuntary = true;
  const ScriptCall involuntary = callOf(lost, ctx);
  ASSERT_EQ(involuntary.arg_count, 5);
  EXPECT_EQ(involuntary.args[3], kNotReentrantArg);
  EXPECT_EQ(involuntary.args[4], kInvoluntaryArg);
  ASSERT_EQ(involuntary.key_count, 4);
  EXPECT_EQ(involuntary.keys[3], "p:{n}:delay") << "a lease this sidecar does not know";
  // A release limited to one grant's fencing token carries it as ARGV[6] (after "not sharded",
  // "not involuntary"); only release.lua checks it (permits and readers have no token per lease).
  Operation given_back = Operation::release("n", "o");
  given_back.only_token = 1234;
  const ScriptCall token_limited = callOf(given_back, ctx);
  ASSERT_EQ(token_limited.arg_count, 6);
  EXPECT_EQ(token_limited.args[3], kNotReentrantArg);
  EXPECT_EQ(token_limited.args[4], kNotReentrantArg);
  EXPECT_EQ(token_limited.args[5], "1234");
  EXPECT_EQ(callOf(given_back.of(LockKind::kSemaphore), ctx).arg_count, 3);
  // A lease known to have no delay leaves the key out of extend, release and hand-off (a key
  // that does not exist draws TRYAGAIN while its Cluster slot migrates).
  Operation plain_release = Operation::release("n", "o");
  plain_release.lease_may_delay = false;
  EXPECT_EQ(callOf(plain_release, ctx).key_count, 3);
  Operation plain_extend = Operation::extend("n", "o", 9);
  plain_extend.lease_may_delay = false;
  EXPECT_EQ(callOf(plain_extend, ctx).key_count, 3);
  Operation plain_hand_off = Operation::handOff("n", "o", "o2", 100);
  plain_hand_off.lease_may_delay = false;
  EXPECT_EQ(callOf(plain_hand_off, ctx).key_count, 3);
  plain_hand_off.lock_delay_ms = 250;  // the next owner's delay
  const ScriptCall delayed_hand_off = callOf(plain_hand_off, ctx);
  ASSERT_EQ(delayed_hand_off.key_count, 4);
  EXPECT_EQ(delayed_hand_off.keys[3], "p:{n}:delay");
  ASSERT_EQ(delayed_hand_off.arg_count, 8);
  EXPECT_EQ(delayed_hand_off.args[5], "250");
  EXPECT_EQ(delayed_hand_off.args[7], announcement::kGranted) << "a hand-off is a grant";
  // Elections have no lock-delay: their extend and release name none.
  EXPECT_EQ(callOf(Operation::extend("n", "o", 9).of(LockKind::kElection), ctx).key_count, 3);
  EXPECT_EQ(callOf(Operation::release("n", "o").of(LockKind::kElection), ctx).key_count, 3);
  auto reader_busy = decode(reply(5, 0, 600), ScriptId::kSharedAcquire);
  ASSERT_TRUE(reader_busy.isOk());
  EXPECT_EQ(reader_busy->busy_reason, BusyReason::kLockDelay) << "readers wait out a delay too";
  EXPECT_EQ(reader_busy->holder_ttl_ms, 600);
  EXPECT_FALSE(decode(reply(5, 0, 600), ScriptId::kSemAcquire).isOk()) << "permits have none";
  auto busy = decode(reply(5, 0, 700), ScriptId::kAcquire);
  ASSERT_TRUE(busy.isOk());
  EXPECT_EQ(busy->code, OutcomeCode::kBusy);
  EXPECT_EQ(busy->busy_reason, BusyReason::kLockDelay);
  EXPECT_EQ(busy->holder_ttl_ms, 700);

  const ScriptCall release = callOf(Operation::release("n", "o"), ctx);
  EXPECT_EQ(release.script, ScriptId::kRelease);
  ASSERT_EQ(release.arg_count, 3);
  EXPECT_EQ(release.args[1], "p:released:{n}");
  EXPECT_EQ(release.args[2], announcement::kReleased) << "the payload: what changed";
  EXPECT_EQ(callOf(Operation::forceRelease("n"), ctx).args[1], announcement::kForced);
  const ScriptCall sharded =
      callOf(Operation::release("n", "o"), ScriptContext{"p:", "61000", true});
  ASSERT_EQ(sharded.arg_count, 4);
  EXPECT_EQ(sharded.args[3], kShardedPublish);
  Operation sharded_writer = Operation::acquire("n", "o", 5000);
  sharded_writer.writer_wait_ms = 1700;
  const ScriptCall widest = callOf(sharded_writer, ScriptContext{"p:", "61000", true});
  ASSERT_EQ(widest.arg_count, 10) << "the most arguments a call carries: ScriptCall::args fits them";
  EXPECT_EQ(widest.args[9], kShardedPublish);

  const ScriptCall hand_off = callOf(Operation::handOff("n", "o", "next", 900), ctx);
  EXPECT_EQ(hand_off.script, ScriptId::kReleaseGrant);
  ASSERT_EQ(hand_off.arg_count, 8);
  EXPECT_EQ(hand_off.args[5], "0") << "the next owner has no lock-delay";
  EXPECT_EQ(hand_off.args[7], announcement::kGranted) << "a hand-off wakes no waiter";
  EXPECT_EQ(hand_off.keys[2], "p:{n}:holder") << "the next owner's holder record";
  EXPECT_EQ(hand_off.args[1], "next");
  EXPECT_EQ(hand_off.args[2], "900");
  EXPECT_EQ(callOf(Operation::extend("n", "o", 1), ctx).script, ScriptId::kExtend);
  EXPECT_EQ(callOf(Operation::extend("n", "o", 1), ctx).keys[2], "p:{n}:holder");
  EXPECT_EQ(callOf(Operation::extend("n", "o", 1), ctx).args[3], kHolderFollowsLeaseArg);
  EXPECT_EQ(callOf(Operation::inspect("n"), ctx).arg_count, 0);
  EXPECT_EQ(callOf(Operation::inspect("n"), ctx).keys[2], "p:{n}:holder");
  EXPECT_EQ(release.keys[2], "p:{n}:holder") << "deleted with the lease";
  EXPECT_EQ(callOf(Operation::forceRelease("n"), ctx).script, ScriptId::kForceRelease);

  // A semaphore: its own keys (the kind is in them), its own counter, its limit as ARGV.
  const ScriptCall permit = callOf(Operation::acquirePermit("n", "p", 900, 3), ctx);
  EXPECT_EQ(permit.script, ScriptId::kSemAcquire);
  ASSERT_EQ(permit.key_count, 4);
  EXPECT_EQ(permit.keys[0], "p:{n}:sem");
  EXPECT_EQ(permit.keys[1], "p:{n}:sem:token") << "its own counter, not the mutex's";
  EXPECT_EQ(permit.keys[2], "p:{n}:sem:limit");
  EXPECT_EQ(permit.keys[3], "p:{n}:sem:holders") << "the permits' holders, in the same slot";
  EXPECT_EQ(permit.args[2], "3");
  Operation labelled_op = Operation::acquirePermit("n", "p", 900, 3);
  labelled_op.holder = "pod-a";
  const ScriptCall labelled_permit = callOf(labelled_op, ctx);
  ASSERT_EQ(labelled_permit.arg_count, 5);
  EXPECT_EQ(labelled_permit.args[4], "pod-a");
  const ScriptCall sem_inspect = callOf(Operation::inspect("n").of(LockKind::kSemaphore), ctx);
  ASSERT_EQ(sem_inspect.arg_count, 1);
  EXPECT_EQ(sem_inspect.args[0], std::to_string(backend::kMaxListedHolders));
  EXPECT_EQ(callOf(Operation::release("n", "p").of(LockKind::kSemaphore), ctx).script,
            ScriptId::kSemRelease);
  EXPECT_EQ(callOf(Operation::inspect("n").of(LockKind::kSemaphore), ctx).script,
            ScriptId::kSemInspect);

  // Readers share the mutex's key and counter, and list themselves in a sorted set of their own.
  const ScriptCall reader = callOf(Operation::acquireShared("n", "r", 900), ctx);
  EXPECT_EQ(reader.script, ScriptId::kSharedAcquire);
  ASSERT_EQ(reader.key_count, 6);
  EXPECT_EQ(reader.keys[0], "p:{n}");
  EXPECT_EQ(reader.keys[1], "p:{n}:token") << "readers and writers: one counter";
  EXPECT_EQ(reader.keys[2], "p:{n}:readers");
  EXPECT_EQ(reader.keys[3], "p:{n}:writer") << "a queued writer's mark turns readers away";
  EXPECT_EQ(reader.keys[4], "p:{n}:readers:holders");
  EXPECT_EQ(reader.keys[5], "p:{n}:delay") << "a writer's lock-delay holds readers back too";
  const ScriptCall reader_release = callOf(Operation::release("n", "r").of(LockKind::kShared), ctx);
  ASSERT_EQ(reader_release.key_count, 4);
  EXPECT_EQ(reader_release.keys[3], "p:{n}:readers:holders") << "a leaving reader's label goes";
  const ScriptCall readers_inspect = callOf(Operation::inspect("n").of(LockKind::kShared), ctx);
  ASSERT_EQ(readers_inspect.key_count, 5);
  EXPECT_EQ(readers_inspect.keys[4], "p:{n}:readers:holders");
  ASSERT_EQ(readers_inspect.arg_count, 1);
  ASSERT_EQ(reader.arg_count, 6);
  EXPECT_EQ(reader.args[3], "") << "no label: none recorded";
  EXPECT_EQ(reader.args[5], announcement::kGranted) << "a first reader is announced";
  EXPECT_EQ(callOf(Operation::release("n", "r").of(LockKind::kShared), ctx).script,
            ScriptId::kSharedRelease);
  EXPECT_EQ(callOf(Operation::extend("n", "r", 9).of(LockKind::kShared), ctx).script,
            ScriptId::kSharedExtend);
  // A queued writer's attempt carries its mark; a re-entry flag keeps its place before it.
  Operation queued_writer = Operation::acquire("n", "o", 5000);
  queued_writer.writer_wait_ms = 1700;
  const ScriptCall marking = callOf(queued_writer, ctx);
  ASSERT_EQ(marking.key_count, 5);
  EXPECT_EQ(marking.keys[2], "p:{n}:writer");
  EXPECT_EQ(marking.keys[3], "p:{n}:holder");
  EXPECT_EQ(marking.keys[4], "p:{n}:delay");
  EXPECT_EQ(callOf(Operation::acquire("n", "o", 5000), ctx).key_count, 4)
      << "a single try names no mark";
  ASSERT_EQ(marking.arg_count, 9);
  EXPECT_EQ(marking.args[4], kNotReentrantArg);
  EXPECT_EQ(marking.args[5], "1700");
  queued_writer.reentrant = true;
  EXPECT_EQ(callOf(queued_writer, ctx).args[4], kReentrantArg);

  // Fair locks: acquire and withdraw work on the queue's keys too; every other verb is the
  // mutex's, on the mutex's keys.
  Operation fair_waiter = Operation::acquire("n", "w1", 5000).of(LockKind::kFair);
  fair_waiter.claim_ms = 2100;
  fair_waiter.also_waiting = "w2 w3";
  const ScriptCall fair = callOf(fair_waiter, ctx);
  EXPECT_EQ(fair.script, ScriptId::kFairAcquire);
  ASSERT_EQ(fair.key_count, 6);
  EXPECT_EQ(fair.keys[2], "p:{n}:fair");
  EXPECT_EQ(fair.keys[3], "p:{n}:fair:claims");
  EXPECT_EQ(fair.keys[4], "p:{n}:holder");
  ASSERT_EQ(fair.arg_count, 9);
  EXPECT_EQ(fair.args[3], "2100");
  EXPECT_EQ(fair.args[4], "") << "no holder label";
  EXPECT_EQ(fair.args[5], "w2 w3");
  EXPECT_EQ(fair.args[6], "0") << "no lock-delay";
  EXPECT_EQ(fair.args[8], announcement::kGranted) << "a fair grant is announced";
  EXPECT_EQ(callOf(Operation::acquire("n", "w", 5).of(LockKind::kFair), ctx).args[3], "0")
      << "a single try never joins the queue";
  EXPECT_EQ(callOf(Operation::withdraw("n", "w1"), ctx).script, ScriptId::kFairWithdraw);
  const ScriptCall fair_release = callOf(Operation::release("n", "w").of(LockKind::kFair), ctx);
  EXPECT_EQ(fair_release.script, ScriptId::kRelease);
  EXPECT_EQ(fair_release.key_count, 4) << "the mutex's keys, its holder record, its delay";
  // A queued writer withdraws its mark, handing it to the writers still queued on its sidecar.
  Operation leaving_writer = Operation::withdraw("n", "w1").of(LockKind::kMutex);
  leaving_writer.writer_wait_ms = 21000;
  leaving_writer.also_waiting = "w2 w3";
  const ScriptCall writer_withdraw = callOf(leaving_writer, ctx);
  EXPECT_EQ(writer_withdraw.script, ScriptId::kWriterWithdraw);
  ASSERT_EQ(writer_withdraw.key_count, 3);
  EXPECT_EQ(writer_withdraw.keys[2], "p:{n}:writer");
  ASSERT_EQ(writer_withdraw.arg_count, 5);
  EXPECT_EQ(writer_withdraw.args[0], "w1");
  EXPECT_EQ(writer_withdraw.args[1], "21000");
  EXPECT_EQ(writer_withdraw.args[2], "w2 w3");
  EXPECT_EQ(writer_withdraw.args[3], releaseChannel("p:", "n")) << "announces like a release";

  // A lock's sync: the counter, and the grant record wherever the owner holds the lease.
  const ScriptCall sync = tokenSyncCall("n", "o", 77, ctx);
  ASSERT_EQ(sync.key_count, 3);
  EXPECT_EQ(sync.keys[0], "p:{n}:token");
  EXPECT_EQ(sync.keys[1], "p:{n}");
  EXPECT_EQ(sync.keys[2], "p:{n}:granted");
  ASSERT_EQ(sync.arg_count, 3);
  EXPECT_EQ(sync.args[0], "77");
  EXPECT_EQ(sync.args[1], ctx.counter_ttl_ms);
  EXPECT_EQ(sync.args[2], "o");
  // An election's sync: its own counter, and the record rewritten where the owner still leads.
  const ScriptCall el_sync = electionSyncCall("n", "o", 78, 1'795'376'077'464, ctx);
  EXPECT_EQ(el_sync.script, ScriptId::kElectionSync);
  ASSERT_EQ(el_sync.key_count, 3);
  EXPECT_EQ(el_sync.keys[0], "p:{n}:el");
  EXPECT_EQ(el_sync.keys[1], "p:{n}:el:token");
  EXPECT_EQ(el_sync.keys[2], "p:{n}:el:leader");
  ASSERT_EQ(el_sync.arg_count, 6);
  EXPECT_EQ(el_sync.args[0], "o");
  EXPECT_EQ(el_sync.args[1], "78");
  EXPECT_EQ(el_sync.args[2], "1795376077464");
  EXPECT_EQ(el_sync.args[3], ctx.counter_ttl_ms);
  EXPECT_EQ(el_sync.args[4], releaseChannel("p:", "n"));
  EXPECT_EQ(el_sync.args[5], announcement::kGranted);
  const ScriptCall::Views v = acquire.views();
  EXPECT_EQ(v.keyArgs().size(), 4u);
  EXPECT_EQ(v.argArgs()[0], "o");
}

// Redlock (grant_records): a mutex or writer acquire and the reads name the node's grant record,
// which tells a read the lease's token where the node's counter may not (a node that granted
// after the vote). Its place: after the writers' marks, before the holder record and the delay
// (acquire.lua finds it by the key count); last in the reads.
TEST(RedisScripts, RedlockGrantsAndReadsNameTheGrantRecord) {
  ScriptContext ctx{"p:", "61000", false};
  ctx.grant_records = true;
  ctx.token_floor = ScriptContext::TokenFloor::kSecond;
  const ScriptCall acquire = callOf(Operation::acquire("n", "o", 5000), ctx);
  ASSERT_EQ(acquire.key_count, 5);
  EXPECT_EQ(acquire.args[2], "61000") << "Redlock's nodes floor tokens by the second";
  EXPECT_EQ(acquire.keys[2], "p:{n}:granted");
  EXPECT_EQ(acquire.keys[3], "p:{n}:holder");
  EXPECT_EQ(acquire.keys[4], "p:{n}:delay");
  Operation writer = Operation::acquire("n", "w", 5000);
  writer.writer_wait_ms = 21000;
  const ScriptCall queued_writer = callOf(writer, ctx);
  ASSERT_EQ(queued_writer.key_count, 6) << "the most keys a call names: ScriptCall::keys fits them";
  EXPECT_EQ(queued_writer.keys[2], "p:{n}:writer");
  EXPECT_EQ(queued_writer.keys[3], "p:{n}:granted");
  EXPECT_EQ(queued_writer.keys[5], "p:{n}:delay");
  const ScriptCall inspect = callOf(Operation::inspect("n"), ctx);
  ASSERT_EQ(inspect.key_count, 4);
  EXPECT_EQ(inspect.keys[3], "p:{n}:granted");
  const ScriptCall shared_inspect = callOf(Operation::inspect("n").of(LockKind::kShared), ctx);
  ASSERT_EQ(shared_inspect.key_count, 6);
  EXPECT_EQ(shared_inspect.keys[5], "p:{n}:granted");
  // An extend keeps the record as long as the counter (ARGV[5] says KEYS[4] is the record).
  Operation extend = Operation::extend("n", "o", 5000);
  extend.lease_may_delay = true;
  const ScriptCall renewal = callOf(extend, ctx);
  ASSERT_EQ(renewal.key_count, 5);
  EXPECT_EQ(renewal.keys[3], "p:{n}:granted");
  EXPECT_EQ(renewal.keys[4], "p:{n}:delay") << "still the last key";
  ASSERT_EQ(renewal.arg_count, 5);
  EXPECT_EQ(renewal.args[3], kHolderFollowsLeaseArg);
  EXPECT_EQ(renewal.args[4], kGrantRecordArg);
  // Readers record nothing (each reader is a lease of its own), nor do releases; and without
  // grant records (every other backend) nothing names the key.
  const ScriptContext others{"p:", "61000", false};
  for (const Operation& op :
       {Operation::acquire("n", "r", 5000).of(LockKind::kShared), Operation::release("n", "o")}) {
    EXPECT_EQ(callOf(op, ctx).key_count, callOf(op, others).key_count) << verbName(op.verb);
  }
  for (const Operation& op : {Operation::acquire("n", "o", 5000), Operation::inspect("n"),
                              Operation::inspect("n").of(LockKind::kShared), extend}) {
    const ScriptCall c = callOf(op, others);
    for (size_t i = 0; i < c.key_count; ++i) EXPECT_NE(c.keys[i], "p:{n}:granted");
  }
  EXPECT_EQ(callOf(extend, others).arg_count, 4);
}

// Redlock: the clean-up of a mutex acquire that was not granted is rollback.lua, announced
// `rolled_back` (waiters wake; event streams end no lease). It names the lease, its holder record,
// the grant record (read only: the tokens tell the attempt's lease) and the lock-delay, last; never
// the counter.
TEST(RedisScripts, ARedlockAcquiresCleanUpIsARollback) {
  ScriptContext ctx{"p:", "61000", false};
  ctx.grant_records = true;
  const ScriptCall c = rollbackCall("n", "o", 41, 43, ctx);
  EXPECT_EQ(c.script, ScriptId::kRollback);
  EXPECT_EQ(c.node_op, NodeOp::kRelease);
  EXPECT_EQ(std::vector<std::string>(c.keys.begin(), c.keys.begin() + c.key_count),
            (std::vector<std::string>{"p:{n}", "p:{n}:holder", "p:{n}:granted", "p:{n}:delay"}));
  EXPECT_EQ(std::vector<std::string>(c.args.begin(), c.args.begin() + c.arg_count),
            (std::vector<std::string>{"o", "41", "43", releaseChannel("p:", "n"),
                                      std::string(announcement::kRolledBack)}));
  EXPECT_TRUE(announcement::freesLock(announcement::kRolledBack)) << "waiters still wake";
  // Its replies are a release's: deleted, held by another owner, nothing of the attempt's here.
  EXPECT_EQ(decode(reply(1, 0, 0, 0), ScriptId::kRollback)->code, OutcomeCode::kOk);
  EXPECT_EQ(decode(reply(0, 0, 900), ScriptId::kRollback)->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(decode(reply(-1, 0, 0), ScriptId::kRollback)->code, OutcomeCode::kNotHeld);
}

// A verb no script serves for a kind is an error, never another script in its place (it used to
// become the kind's inspect, which changed nothing and answered as if it had): readers and
// permits are never handed on nor force-released, and have no queue to leave.
TEST(RedisScripts, AVerbNoScriptServesIsAnError) {
  const ScriptContext ctx{"p:", "61000", false};
  for (LockKind kind : {LockKind::kSemaphore, LockKind::kShared}) {
    for (const Operation& op :
         {Operation::handOff("n", "o", "next", 900).of(kind),
          Operation::withdraw("n", "o").of(kind), Operation::forceRelease("n").of(kind)}) {
      const std::string pair = std::string(verbName(op.verb)) + " of " + lockKindName(kind);
      const StatusOr<ScriptCall> call = scriptCallFor(op, ctx);
      ASSERT_FALSE(call.isOk()) << pair;
      EXPECT_EQ(call.status().code(), StatusCode::kFailedPrecondition) << pair;
      EXPECT_NE(call.status().message().find(verbName(op.verb)), std::string::npos)
          << call.status().message();
      EXPECT_NE(call.status().message().find(lockKindName(kind)), std::string::npos)
          << call.status().message();
      EXPECT_EQ(scriptFor(kind, op.verb).status().code(), StatusCode::kFailedPrecondition);
    }
  }
  // Elections are never handed on, force-released or queued in Redis; only they proclaim.
  for (const Operation& op : {Operation::handOff("n", "o", "next", 900).of(LockKind::kElection),
                              Operation::withdraw("n", "o").of(LockKind::kElection),
                              Operation::forceRelease("n").of(LockKind::kElection),
                              Operation::proclaim("n", "o", "v").of(LockKind::kMutex),
                              Operation::proclaim("n", "o", "v").of(LockKind::kFair),
                              Operation::proclaim("n", "o", "v").of(LockKind::kShared),
                              Operation::proclaim("n", "o", "v").of(LockKind::kSemaphore)}) {
    const StatusOr<ScriptCall> call = scriptCallFor(op, ctx);
    ASSERT_FALSE(call.isOk()) << verbName(op.verb) << " of " << lockKindName(op.kind);
    EXPECT_EQ(call.status().code(), StatusCode::kFailedPrecondition);
  }
  // Every other pair has its script.
  for (LockKind kind : {LockKind::kMutex, LockKind::kFair}) {
    for (size_t v = 0; v < kVerbCount; ++v) {
      if (static_cast<Verb>(v) == Verb::kProclaim) continue;
      EXPECT_TRUE(scriptFor(kind, static_cast<Verb>(v)).isOk())
          << verbName(static_cast<Verb>(v)) << " of " << lockKindName(kind);
    }
  }
  for (Verb verb :
       {Verb::kAcquire, Verb::kRelease, Verb::kExtend, Verb::kInspect, Verb::kProclaim}) {
    EXPECT_TRUE(scriptFor(LockKind::kElection, verb).isOk()) << verbName(verb) << " of election";
  }
  for (LockKind kind : {LockKind::kSemaphore, LockKind::kShared}) {
    for (Verb verb : {Verb::kAcquire, Verb::kRelease, Verb::kExtend, Verb::kInspect}) {
      EXPECT_TRUE(scriptFor(kind, verb).isOk()) << verbName(verb) << " of " << lockKindName(kind);
    }
  }
  EXPECT_EQ(*scriptFor(LockKind::kFair, Verb::kWithdraw), ScriptId::kFairWithdraw);
  EXPECT_EQ(*scriptFor(LockKind::kMutex, Verb::kWithdraw), ScriptId::kWriterWithdraw);
}

// An election's verbs: its own three keys (one hash tag: one Cluster slot), campaign and proclaim
// announce on the name's release channel, renew and resign are the mutex's scripts.
TEST(RedisScripts, ElectionVerbsWorkOnTheElectionsOwnKeys) {
  const ScriptContext ctx{"p:", "61000", false};
  EXPECT_EQ(electionKey("p:", "n"), "p:{n}:el");
  EXPECT_EQ(electionTokenKey("p:", "n"), "p:{n}:el:token");
  EXPECT_EQ(electionLeaderKey("p:", "n"), "p:{n}:el:leader");
  auto expectElectionKeys = [](const ScriptCall& c) {
    ASSERT_EQ(c.key_count, 3) << scriptName(c.script);
    EXPECT_EQ(c.keys[0], "p:{n}:el") << "never the mutex's key";
    EXPECT_EQ(c.keys[1], "p:{n}:el:token") << "its own counter: the term";
    EXPECT_EQ(c.keys[2], "p:{n}:el:leader");
  };

  const std::string value(4096, 'v');  // the longest value the API lets through
  const ScriptCall campaign = callOf(Operation::campaign("n", "o", 5000, "node-a", value), ctx);
  EXPECT_EQ(campaign.script, ScriptId::kElectionCampaign);
  expectElectionKeys(campaign);
  ASSERT_EQ(campaign.arg_count, 7);
  EXPECT_EQ(campaign.args[0], "o");
  EXPECT_EQ(campaign.args[1], "5000");
  EXPECT_EQ(campaign.args[2], "61000 us");
  EXPECT_EQ(campaign.args[3], "node-a");
  EXPECT_EQ(campaign.args[4], value) << "copied, not a view of the operation's string";
  EXPECT_EQ(campaign.args[5], releaseChannel("p:", "n")) << "a new leader is announced";
  EXPECT_EQ(campaign.args[6], announcement::kGranted);
  const ScriptCall sharded =
      callOf(Operation::campaign("n", "o", 5000, "node-a", "v"), ScriptContext{"p:", "1", true});
  ASSERT_EQ(sharded.arg_count, 8);
  EXPECT_EQ(sharded.args[7], kShardedPublish);
  EXPECT_EQ(sharded.views().argArgs().size(), 8u);

  const ScriptCall renew = callOf(Operation::extend("n", "o", 7000).of(LockKind::kElection), ctx);
  EXPECT_EQ(renew.script, ScriptId::kExtend);
  expectElectionKeys(renew);
  ASSERT_EQ(renew.arg_count, 3);
  EXPECT_EQ(renew.args[1], "7000");
  EXPECT_EQ(renew.args[2], "61000") << "the record and the counter live on with the lease";

  const ScriptCall resign = callOf(Operation::release("n", "o").of(LockKind::kElection), ctx);
  EXPECT_EQ(resign.script, ScriptId::kRelease);
  expectElectionKeys(resign);
  ASSERT_EQ(resign.arg_count, 3);
  EXPECT_EQ(resign.args[0], "o");
  EXPECT_EQ(resign.args[1], releaseChannel("p:", "n"));

  const ScriptCall proclaim = callOf(Operation::proclaim("n", "o", "new value"), ctx);
  EXPECT_EQ(proclaim.script, ScriptId::kElectionProclaim);
  expectElectionKeys(proclaim);
  ASSERT_EQ(proclaim.arg_count, 4);
  EXPECT_EQ(proclaim.args[0], "o");
  EXPECT_EQ(proclaim.args[1], "new value");
  EXPECT_EQ(proclaim.args[2], releaseChannel("p:", "n"));
  EXPECT_EQ(proclaim.args[3], announcement::kProclaimed);

  const ScriptCall leader = callOf(Operation::inspect("n").of(LockKind::kElection), ctx);
  EXPECT_EQ(leader.script, ScriptId::kElectionLeader);
  expectElectionKeys(leader);
  EXPECT_EQ(leader.arg_count, 0) << "the owner is never asked for nor revealed";
}

TEST(RedisReplies, ElectionCampaignProclaimAndLeader) {
  // Campaign: elected with its term and since; busy; this owner leads already (no re-entry).
  auto elected = decode(array({integer(1), integer(1'795'376'077'464'695), integer(5000),
                               integer(1), integer(1'795'376'077'464)}),
                        ScriptId::kElectionCampaign);
  ASSERT_TRUE(elected.isOk()) << elected.status().toString();
  EXPECT_TRUE(elected->ok());
  EXPECT_EQ(elected->token, 1'795'376'077'464'695u);
  EXPECT_EQ(elected->validity_ms, 5000);
  EXPECT_EQ(elected->holds, 1);
  EXPECT_EQ(elected->leader.since_ms, 1'795'376'077'464);
  EXPECT_TRUE(elected->leader.candidate.empty()) << "a grant carries only since";
  auto busy = decode(reply(0, 0, 1234), ScriptId::kElectionCampaign);
  ASSERT_TRUE(busy.isOk());
  EXPECT_EQ(busy->code, OutcomeCode::kBusy);
  EXPECT_EQ(busy->busy_reason, BusyReason::kHeld);
  EXPECT_EQ(busy->holder_ttl_ms, 1234);
  auto ours = decode(reply(3, 0, 900), ScriptId::kElectionCampaign);
  ASSERT_TRUE(ours.isOk());
  EXPECT_EQ(ours->code, OutcomeCode::kBusy);
  EXPECT_EQ(ours->busy_reason, BusyReason::kHeldByYou);
  EXPECT_EQ(decode(reply(0, 0, -1), ScriptId::kElectionCampaign)->holder_ttl_ms, -1);

  // Proclaim: same term, the TTL left; not the leader; nobody leads.
  auto proclaimed = decode(reply(1, 42, 800, 1), ScriptId::kElectionProclaim);
  ASSERT_TRUE(proclaimed.isOk());
  EXPECT_TRUE(proclaimed->ok());
  EXPECT_EQ(proclaimed->token, 42u);
  EXPECT_EQ(proclaimed->validity_ms, 800);
  EXPECT_EQ(decode(reply(0, 0, 5), ScriptId::kElectionProclaim)->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(decode(reply(0, 0, 5), ScriptId::kElectionProclaim)->holder_ttl_ms, 5);
  EXPECT_EQ(decode(reply(-1, 0, 0), ScriptId::kElectionProclaim)->code, OutcomeCode::kNotHeld);

  // Inspect: the record while somebody leads; the last term when nobody does.
  auto leads = decode(array({integer(1), integer(42), integer(700), str("node-a"), str(""),
                             integer(1'795'376'077'464), str("9f2c")}),
                      ScriptId::kElectionLeader);
  ASSERT_TRUE(leads.isOk()) << leads.status().toString();
  EXPECT_TRUE(leads->ok());
  EXPECT_EQ(leads->token, 42u);
  EXPECT_EQ(leads->validity_ms, 700);
  EXPECT_EQ(leads->leader.candidate, "node-a");
  EXPECT_EQ(leads->leader.value, "") << "an empty value is a value";
  EXPECT_EQ(leads->leader.since_ms, 1'795'376'077'464);
  EXPECT_EQ(leads->leader.lease, "9f2c") << "the lease's digest, which Redlock compares";
  auto nobody = decode(reply(-1, 42, 0), ScriptId::kElectionLeader);
  ASSERT_TRUE(nobody.isOk());
  EXPECT_EQ(nobody->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(nobody->token, 42u) << "the last term, led or not";
  EXPECT_TRUE(nobody->leader.candidate.empty());

  // Malformed: another code for the script, a field more or less, a text for a number.
  const std::vector<std::pair<ScriptId, RedisValue>> malformed = {
      {ScriptId::kElectionCampaign, reply(1, 7, 5000, 1)},  // no since
      {ScriptId::kElectionCampaign,
       array({integer(1), integer(0), integer(5000), integer(1), integer(9)})},  // no term
      {ScriptId::kElectionCampaign,
       array({integer(1), integer(7), integer(5000), integer(1), integer(0)})},  // since 0
      {ScriptId::kElectionCampaign,
       array({integer(1), integer(7), integer(5000), integer(2), integer(9)})},  // re-entered?
      {ScriptId::kElectionCampaign,
       array({integer(1), integer(7), integer(5000), integer(1), str("9")})},
      {ScriptId::kElectionCampaign, reply(-1, 0, 0)},
      {ScriptId::kElectionCampaign, reply(4, 0, 0)},
      {ScriptId::kElectionCampaign, reply(0, 0, 5, 1)},
      {ScriptId::kElectionProclaim, reply(1, 42, 800)},
      {ScriptId::kElectionProclaim, reply(3, 0, 800)},
      {ScriptId::kElectionProclaim,
       array({integer(1), integer(42), integer(800), integer(1), integer(9)})},
      {ScriptId::kElectionLeader, reply(1, 42, 700)},
      {ScriptId::kElectionLeader, reply(0, 0, 700)},
      {ScriptId::kElectionLeader, reply(-1, 42, 0, 0)},
      {ScriptId::kElectionLeader,
       array({integer(1), integer(42), integer(700), str("node-a"), str("v")})},
      {ScriptId::kElectionLeader,
       array({integer(1), integer(42), integer(700), integer(5), str("v"), integer(9), str("d")})},
      {ScriptId::kElectionLeader, array({integer(1), integer(42), integer(700), str("node-a"),
                                         RedisValue{}, integer(9), str("d")})},
      {ScriptId::kElectionLeader,
       array({integer(1), integer(42), integer(700), str("node-a"), str("v"), str("9"), str("d")})},
      {ScriptId::kElectionLeader, array({integer(1), integer(42), integer(700), str("node-a"),
                                         str("v"), integer(-1), str("d")})},
      {ScriptId::kElectionLeader,
       array({str("1"), integer(42), integer(700), str("node-a"), str("v"), integer(9), str("d")})},
      {ScriptId::kElectionLeader, str("node-a")},
      {ScriptId::kElectionLeader,  // no lease digest
       array({integer(1), integer(42), integer(700), str("node-a"), str("v"), integer(9)})},
      {ScriptId::kElectionLeader,  // a number for the digest
       array({integer(1), integer(42), integer(700), str("node-a"), str("v"), integer(9),
              integer(5)})},
      {ScriptId::kElectionSync, reply(0, 0, 5)},
  };
  for (size_t i = 0; i < malformed.size(); ++i) {
    const auto& [script, value] = malformed[i];
    auto bad = decode(value, script);
    ASSERT_FALSE(bad.isOk()) << "case " << i << " of " << scriptName(script);
    EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
    EXPECT_NE(bad.status().message().find(scriptName(script)), std::string::npos);
  }
  // Errors and failures pass through as for every script.
  EXPECT_EQ(decode(error("NOPERM no hset"), ScriptId::kElectionProclaim).status().code(),
            StatusCode::kInternal);
  EXPECT_EQ(
      decode(StatusOr<RedisValue>(unavailable("down")), ScriptId::kElectionLeader).status().code(),
      StatusCode::kUnavailable);
}

TEST(RedisBackoff, GrowsDoublesAndCapsWithJitter) {
  for (int i = 0; i < 200; ++i) {
    const int64_t d0 = reconnectDelayMs(0, 100, 5000);
    EXPECT_GE(d0, 50);
    EXPECT_LE(d0, 100);
    const int64_t d3 = reconnectDelayMs(3, 100, 5000);
    EXPECT_GE(d3, 400);
    EXPECT_LE(d3, 800);
    const int64_t big = reconnectDelayMs(1000, 100, 5000);  // no overflow
    EXPECT_GE(big, 2500);
    EXPECT_LE(big, 5000);
  }
  EXPECT_GE(reconnectDelayMs(0, 0, 0), 1);
}

}  // namespace
}  // namespace sidelock::backend
