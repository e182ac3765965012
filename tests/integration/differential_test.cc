// The memory backend is the reference model of the Redis scripts: the same random sequences of
// operations (mutex with reentrant holds and hand-offs, readers of read/write locks meeting those
// mutexes as writers (with writer-waiting marks and force releases), semaphores with limits) run
// against
// MemoryBackend and against RedisBackend on a real redis-server, and every outcome must agree
// (code, holds, permits used, limit; elections: the leader's record). Fencing tokens start from
// different bases (the memory counter at 1, Redis's at TIME in microseconds), so they are checked
// for what both promise: strictly increasing per name on each side. TTLs are long enough that
// nothing expires.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/memory_backend.h"
#include "integration/redis_test_env.h"
#include "redis/redis_backend.h"

namespace sidelock::backend {
namespace {

using testing::LoopEnv;
using testing::redisConfig;
using testing::RedisServer;

struct Step {
  Operation op;
  std::string describe() const {
    std::ostringstream s;
    s << verbName(op.verb) << " " << lockKindName(op.kind) << " " << op.name << " by " << op.owner;
    if (op.verb == Verb::kHandOff) s << " to " << op.next_owner;
    if (op.reentrant) s << " reentrant";
    if (op.writer_wait_ms > 0) s << " marking writer waiting";
    if (op.verb == Verb::kWithdraw && op.kind == LockKind::kMutex) {
      s << " (writer), marking [" << op.also_waiting << "]";
    }
    if (op.claim_ms > 0) s << " queued (claim), with [" << op.also_waiting << "]";
    if (op.kind == LockKind::kSemaphore && op.verb == Verb::kAcquire) s << " limit " << op.limit;
    return s.str();
  }
};

class DifferentialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_backend_ = std::make_unique<RedisBackend>(
        env_.loop(), env_.scheduler(), redisConfig(redis_.port()), 600'000, env_.metrics());
    redis_backend_->start();
    ASSERT_TRUE(env_.runUntil([&] { return redis_backend_->health().ready; }));
  }
  void TearDown() override {
    env_.shutDown(redis_backend_);
    memory_.shutdown([] {});
    env_.runFor(10);
    env_.close();
  }

  StatusOr<Outcome> runOn(Backend& b, const Operation& op) {
    std::optional<StatusOr<Outcome>> result;
    b.run(op, [&](StatusOr<Outcome> r) { result.emplace(std::move(r)); });
    if (!env_.runUntil([&] { return result.has_value(); })) return internalError("no answer");
    return std::move(*result);
  }

  RedisServer redis_;
  LoopEnv env_;
  MemoryBackend memory_{env_.scheduler()};
  std::unique_ptr<RedisBackend> redis_backend_;
};

// A verb a kind does not serve (a reader's hand-off, a permit's force release...) is refused the
// same way by both: kFailedPrecondition, and nothing changes.
TEST_F(DifferentialTest, VerbsAKindDoesNotServeAreRefusedByBoth) {
  for (LockKind kind : {LockKind::kSemaphore, LockKind::kShared}) {
    for (const Operation& op :
         {Operation::handOff("x", "o", "next", 900).of(kind),
          Operation::withdraw("x", "o").of(kind), Operation::forceRelease("x").of(kind)}) {
      const std::string pair = std::string(verbName(op.verb)) + " of " + lockKindName(kind);
      StatusOr<Outcome> m = runOn(memory_, op);
      StatusOr<Outcome> r = runOn(*redis_backend_, op);
      ASSERT_FALSE(m.isOk()) << pair;
      ASSERT_FALSE(r.isOk()) << pair;
      EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << pair;
      EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition)
          << pair << ": " << r.status().message();
    }
  }
  // Elections are never handed on, force-released or withdrawn; only elections proclaim.
  for (const Operation& op : {Operation::handOff("x", "o", "next", 900).of(LockKind::kElection),
                              Operation::withdraw("x", "o").of(LockKind::kElection),
                              Operation::forceRelease("x").of(LockKind::kElection),
                              Operation::proclaim("x", "o", "v").of(LockKind::kMutex),
                              Operation::proclaim("x", "o", "v").of(LockKind::kSemaphore)}) {
    const std::string pair = std::string(verbName(op.verb)) + " of " + lockKindName(op.kind);
    StatusOr<Outcome> m = runOn(memory_, op);
    StatusOr<Outcome> r = runOn(*redis_backend_, op);
    ASSERT_FALSE(m.isOk() || r.isOk()) << pair;
    EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << pair;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << pair;
  }
  EXPECT_EQ(redis_.cli({"DBSIZE"}), "0") << "nothing was written";
}

// A writer's lock-delay holds readers back as it holds writers back (shared_acquire.lua and
// MemoryBackend::applyShared): after a force release of a lease acquired with lock_delay_ms a
// reader is busy with reason kLockDelay on both sides; after a clean release it is granted.
TEST_F(DifferentialTest, AWritersLockDelayHoldsReadersBackOnBoth) {
  for (Backend* b : {static_cast<Backend*>(&memory_), static_cast<Backend*>(redis_backend_.get())}) {
    const char* side = b == &memory_ ? "memory" : "redis";
    Operation writer = Operation::acquire("d", "w", 60'000);
    writer.lock_delay_ms = 30'000;
    ASSERT_EQ(runOn(*b, writer)->code, OutcomeCode::kOk) << side;
    ASSERT_EQ(runOn(*b, Operation::forceRelease("d"))->code, OutcomeCode::kOk) << side;
    StatusOr<Outcome> reader = runOn(*b, Operation::acquireShared("d", "r", 5000));
    ASSERT_TRUE(reader.isOk()) << side << ": " << reader.status().message();
    EXPECT_EQ(reader->code, OutcomeCode::kBusy) << side;
    EXPECT_EQ(reader->busy_reason, BusyReason::kLockDelay) << side;
    EXPECT_GT(reader->holder_ttl_ms, 29'000) << side << ": what is left of the delay";
    EXPECT_LE(reader->holder_ttl_ms, 30'000) << side;
    // A clean release leaves no delay: the reader gets in at once.
    Operation clean = Operation::acquire("c", "w", 60'000);
    clean.lock_delay_ms = 30'000;
    ASSERT_EQ(runOn(*b, clean)->code, OutcomeCode::kOk) << side;
    ASSERT_EQ(runOn(*b, Operation::release("c", "w"))->code, OutcomeCode::kOk) << side;
    EXPECT_EQ(runOn(*b, Operation::acquireShared("c", "r", 5000))->code, OutcomeCode::kOk) << side;
  }
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{d}:readers"}), "0") << "the refused reader wrote nothing";
}

// Elections: random campaigns, renewals, resignations, proclaims and inspects, mixed with mutex
// acquires and releases of the same names (an election has keys of its own: the two never meet).
// Both sides agree on every code, on the leader's record (candidate, value) and on whether the
// term moved; terms strictly increase per name on each side, and since_ms is each side's clock.
TEST_F(DifferentialTest, ElectionSequencesAgreeWithTheReferenceModel) {
  std::mt19937 rng(20261126);
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<std::string> owners = {"o1", "o2", "o3"};
  const std::vector<std::string> values = {"", "v1", "v2"};
  auto pick = [&rng](const std::vector<std::string>& v) -> const std::string& {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  const auto election = LockKind::kElection;
  std::map<std::string, uint64_t> memory_term;
  std::map<std::string, uint64_t> redis_term;
  std::map<Verb, int> agreed_ok;
  constexpr int kSteps = 1500;
  for (int i = 0; i < kSteps; ++i) {
    const std::string& name = pick(names);
    const std::string& owner = pick(owners);
    const int what = std::uniform_int_distribution<int>(0, 99)(rng);
    const std::string candidate = "candidate-" + owner;  // outlives the operation's view of it
    Operation op;
    if (what < 30) {
      op = Operation::campaign(name, owner, 60'000, candidate, pick(values));
    } else if (what < 45) {
      op = Operation::release(name, owner).of(election);
    } else if (what < 55) {
      op = Operation::extend(name, owner, 60'000).of(election);
    } else if (what < 70) {
      op = Operation::proclaim(name, owner, pick(values));
    } else if (what < 85) {
      op = Operation::inspect(name).of(election);
    } else if (what < 93) {
      op = Operation::acquire(name, owner, 60'000);  // the mutex of the same name
    } else {
      op = Operation::release(name, owner);
    }
    StatusOr<Outcome> m = runOn(memory_, op);
    StatusOr<Outcome> r = runOn(*redis_backend_, op);
    const std::string where = "step " + std::to_string(i) + ": " + verbName(op.verb) + " " +
                              lockKindName(op.kind) + " " + name + " by " + owner;
    ASSERT_TRUE(m.isOk()) << where << ": memory " << m.status().toString();
    ASSERT_TRUE(r.isOk()) << where << ": redis " << r.status().toString();
    ASSERT_EQ(outcomeName(m->code), std::string(outcomeName(r->code))) << where;
    if (m->code == OutcomeCode::kBusy) {
      EXPECT_EQ(static_cast<int>(m->busy_reason), static_cast<int>(r->busy_reason)) << where;
    }
    EXPECT_EQ(m->holds, r->holds) << where;
    EXPECT_EQ(m->leader.candidate, r->leader.candidate) << where;
    EXPECT_EQ(m->leader.value, r->leader.value) << where;
    EXPECT_EQ(m->leader.since_ms > 0, r->leader.since_ms > 0) << where;
    if (op.kind != election) continue;
    if (m->ok()) ++agreed_ok[op.verb];
    if (op.verb == Verb::kAcquire && m->ok()) {
      // A new term: strictly above every term of the name before, on each side.
      EXPECT_GT(m->token, memory_term[name]) << where;
      EXPECT_GT(r->token, redis_term[name]) << where;
      memory_term[name] = m->token;
      redis_term[name] = r->token;
    } else if (op.verb == Verb::kInspect || (op.verb == Verb::kProclaim && m->ok())) {
      // The term as the last campaign won it (inspect: 0 before any).
      EXPECT_EQ(m->token, memory_term[name]) << where;
      EXPECT_EQ(r->token, redis_term[name]) << where;
    }
  }
  std::cout << "[differential] " << kSteps
            << " election steps agreed: " << agreed_ok[Verb::kAcquire] << " elected, "
            << agreed_ok[Verb::kProclaim] << " proclaimed, " << agreed_ok[Verb::kExtend]
            << " renewed, " << agreed_ok[Verb::kRelease] << " resigned, "
            << agreed_ok[Verb::kInspect] << " inspected while led\n";
  for (Verb verb :
       {Verb::kAcquire, Verb::kProclaim, Verb::kExtend, Verb::kRelease, Verb::kInspect}) {
    EXPECT_GT(agreed_ok[verb], 20) << verbName(verb) << " succeeded often enough to mean something";
  }
}

TEST_F(DifferentialTest, RandomSequencesAgreeWithTheReferenceModel) {
  std::mt19937 rng(20261123);
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<std::string> owners = {"o1", "o2", "o3"};
  const std::vector<std::string> permits = {"p1", "p2", "p3", "p4"};
  auto pick = [&rng](const std::vector<std::string>& v) -> const std::string& {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  std::map<std::string, uint64_t> last_memory_token;
  std::map<std::string, uint64_t> last_redis_token;
  constexpr int kSteps = 3000;
  int agreed_grants = 0;
  int reader_grants = 0;
  int all_granted = 0;  // multi-lock one-step tries granted
  int fair_grants = 0;
  int fair_turned_away = 0;     // a fair try refused although the lock was free: another's turn
  int readers_turned_away = 0;  // busy although only readers held the lock
  int writers_withdrawn = 0;    // a queued writer's mark removed
  for (int i = 0; i < kSteps; ++i) {
    Step step;
    const std::string& name = pick(names);
    const int what = std::uniform_int_distribution<int>(0, 99)(rng);
    if (what < 2) {
      // A multi-lock's one-step try of both names (half the time on freshly freed names).
      const std::string& owner = pick(owners);
      if (what == 0) {
        for (const std::string& n : names) {
          StatusOr<Outcome> m = runOn(memory_, Operation::forceRelease(n));
          StatusOr<Outcome> r = runOn(*redis_backend_, Operation::forceRelease(n));
          ASSERT_TRUE(m.isOk() && r.isOk());
          ASSERT_EQ(m->code, r->code) << "step " << i << ": force release " << n;
        }
      }
      std::optional<StatusOr<AllOutcome>> m_all;
      std::optional<StatusOr<AllOutcome>> r_all;
      memory_.acquireAll(names, owner, 60'000, "batch",
                         [&](StatusOr<AllOutcome> r) { m_all.emplace(r); });
      redis_backend_->acquireAll(names, owner, 60'000, "batch",
                                 [&](StatusOr<AllOutcome> r) { r_all.emplace(r); });
      ASSERT_TRUE(env_.runUntil([&] { return m_all && r_all; }));
      const std::string where = "step " + std::to_string(i) + ": acquire all by " + owner;
      ASSERT_TRUE(m_all->isOk() && r_all->isOk()) << where;
      ASSERT_EQ((*m_all)->granted, (*r_all)->granted) << where;
      if ((*m_all)->granted) {
        ++all_granted;
        for (size_t n = 0; n < names.size(); ++n) {
          const std::string counter = "mutex/" + names[n];
          EXPECT_GT((*m_all)->tokens[n], last_memory_token[counter]) << where;
          EXPECT_GT((*r_all)->tokens[n], last_redis_token[counter]) << where;
          last_memory_token[counter] = (*m_all)->tokens[n];
          last_redis_token[counter] = (*r_all)->tokens[n];
        }
      } else {
        EXPECT_EQ((*m_all)->busy_index, (*r_all)->busy_index) << where;
      }
      continue;
    }
    if (what < 4) {
      step.op = Operation::forceRelease(name);
    } else if (what < 45) {
      const std::string& owner = pick(owners);
      switch (what % 5) {
        case 0:
          step.op = Operation::acquire(name, owner, 60'000, (what / 5) % 2 == 0);
          // A queued writer: turns new readers away while readers hold the lock.
          if (what % 3 == 0) step.op.writer_wait_ms = 60'000;
          break;
        case 1:
          if (what % 3 == 1) {
            // A queued writer leaves: its mark goes, maybe to another writer still queued.
            step.op = Operation::withdraw(name, owner).of(LockKind::kMutex);
            step.op.writer_wait_ms = 60'000;
            if (what % 2 == 0) step.op.also_waiting = pick(owners);
            break;
          }
          step.op = Operation::release(name, owner);
          break;
        case 2:
          step.op = Operation::extend(name, owner, 60'000);
          break;
        case 3:
          step.op = Operation::inspect(name);
          break;
        default:
          step.op = Operation::handOff(name, owner, pick(owners), 60'000);
          break;
      }
    } else if (what < 58) {
      // Fair acquires of the same names (the mutex verbs above release and extend them): a
      // queued waiter registering itself and maybe another, a single try, a withdrawal.
      const std::string& owner = pick(owners);
      switch (what % 3) {
        case 0:
          step.op = Operation::acquire(name, owner, 60'000).of(LockKind::kFair);
          step.op.claim_ms = 60'000;
          if (what % 2 == 0) step.op.also_waiting = pick(owners);
          break;
        case 1:
          step.op = Operation::acquire(name, owner, 60'000).of(LockKind::kFair);
          break;
        default:
          step.op = Operation::withdraw(name, owner);
          break;
      }
    } else if (what < 70) {
      // Readers of the same names: the mutex holders above are their writers.
      const std::string& owner = pick(owners);
      switch (what % 4) {
        case 0:
        case 1:
          step.op = Operation::acquireShared(name, owner, 60'000);
          break;
        case 2:
          step.op = Operation::release(name, owner).of(LockKind::kShared);
          break;
        default:
          step.op = what % 8 == 3 ? Operation::inspect(name).of(LockKind::kShared)
                                  : Operation::extend(name, owner, 60'000).of(LockKind::kShared);
          break;
      }
    } else {
      const std::string& permit = pick(permits);
      const int64_t limit = what % 7 == 0 ? 3 : 2;
      switch (what % 4) {
        case 0:
        case 1:
          step.op = Operation::acquirePermit(name, permit, 60'000, limit);
          break;
        case 2:
          step.op = Operation::release(name, permit).of(LockKind::kSemaphore);
          break;
        default:
          step.op = what % 8 == 3
                        ? Operation::inspect(name).of(LockKind::kSemaphore)
                        : Operation::extend(name, permit, 60'000).of(LockKind::kSemaphore);
          break;
      }
    }
    StatusOr<Outcome> m = runOn(memory_, step.op);
    StatusOr<Outcome> r = runOn(*redis_backend_, step.op);
    const std::string where = "step " + std::to_string(i) + ": " + step.describe();
    ASSERT_TRUE(m.isOk()) << where << ": memory " << m.status().toString();
    ASSERT_TRUE(r.isOk()) << where << ": redis " << r.status().toString();
    ASSERT_EQ(outcomeName(m->code), std::string(outcomeName(r->code))) << where;
    if (m->code == OutcomeCode::kBusy) {  // what the 409 tells the caller
      EXPECT_EQ(static_cast<int>(m->busy_reason), static_cast<int>(r->busy_reason)) << where;
    }
    EXPECT_EQ(m->holds, r->holds) << where;
    EXPECT_EQ(m->used, r->used) << where;
    EXPECT_EQ(m->limit, r->limit) << where;
    EXPECT_EQ(m->writer_marked, r->writer_marked) << where;
    if (step.op.verb == Verb::kWithdraw && step.op.kind == LockKind::kMutex && m->ok()) {
      ++writers_withdrawn;
    }
    const bool grants = m->ok() && m->token != 0 &&
                        (step.op.verb == Verb::kAcquire || step.op.verb == Verb::kHandOff);
    ASSERT_EQ(grants, r->ok() && r->token != 0 &&
                          (step.op.verb == Verb::kAcquire || step.op.verb == Verb::kHandOff))
        << where;
    // A semaphore has its own counter; readers and writers of a name share the mutex's.
    const LockKind counter_kind =
        step.op.kind == LockKind::kShared || step.op.kind == LockKind::kFair ? LockKind::kMutex
                                                                             : step.op.kind;
    const std::string counter = std::string(lockKindName(counter_kind)) + "/" + name;
    if (grants && step.op.reentrant && m->holds > 1) {
      // A re-entry: the token of the lease it re-enters, on each side.
      EXPECT_EQ(m->token, last_memory_token[counter]) << where;
      EXPECT_EQ(r->token, last_redis_token[counter]) << where;
    } else if (grants) {
      // A new grant: strictly above every token of the name before, on each side.
      EXPECT_GT(m->token, last_memory_token[counter]) << where;
      EXPECT_GT(r->token, last_redis_token[counter]) << where;
      last_memory_token[counter] = m->token;
      last_redis_token[counter] = r->token;
      ++agreed_grants;
      if (step.op.kind == LockKind::kShared) ++reader_grants;
      if (step.op.kind == LockKind::kFair) ++fair_grants;
    }
    if (step.op.kind == LockKind::kShared && step.op.verb == Verb::kAcquire &&
        m->code == OutcomeCode::kBusy && m->used > 0) {
      ++readers_turned_away;
    }
    if (step.op.kind == LockKind::kFair && step.op.verb == Verb::kAcquire &&
        m->code == OutcomeCode::kBusy) {
      // Free if a plain inspect (no side effects) says so.
      StatusOr<Outcome> state = runOn(memory_, Operation::inspect(name));
      if (state.isOk() && state->code == OutcomeCode::kNotHeld) ++fair_turned_away;
    }
  }
  std::cout << "[differential] " << kSteps << " steps agreed: " << agreed_grants << " grants, "
            << reader_grants << " readers, " << readers_turned_away << " readers turned away, "
            << fair_grants << " fair grants, " << fair_turned_away << " fair tries kept out, "
            << all_granted << " one-step multi-locks, " << writers_withdrawn
            << " writers' marks withdrawn\n";
  EXPECT_GT(agreed_grants, 100) << "the sequences granted often enough to mean something";
  EXPECT_GT(reader_grants, 20) << "readers were granted often enough to mean something";
  EXPECT_GT(readers_turned_away, 5) << "writers marked as waiting turned readers away";
  EXPECT_GT(writers_withdrawn, 3) << "queued writers withdrew their marks";
  EXPECT_GT(all_granted, 0) << "a one-step multi-lock try was granted at least once";
  EXPECT_GT(fair_grants, 5) << "fair acquires were granted often enough to mean something";
  EXPECT_GT(fair_turned_away, 5) << "queued waiters kept fair tries out of a free lock";
}

}  // namespace
}  // namespace sidelock::backend
