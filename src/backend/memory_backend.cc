#include "backend/memory_backend.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

namespace sidelock::backend {
namespace {

/// Remaining time rounded up, so "1 us left" reads as 1 ms held, never 0 (Redis PTTL never
/// reports 0 for a live key either).
int64_t remainingMs(int64_t expiry_us, int64_t now_us) { return (expiry_us - now_us + 999) / 1000; }

// A grant's since_ms: wall-clock Unix ms (the scheduler's time has no epoch), as Redis TIME is.
int64_t unixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status shutDownError() { return cancelled("memory backend is shut down"); }

/// Calls `f` with each owner id of a space-separated list (Operation::also_waiting).
template <typename F>
void forEachOwner(std::string_view list, F&& f) {
  while (!list.empty()) {
    const size_t space = list.find(' ');
    if (const std::string_view owner = list.substr(0, space); !owner.empty()) f(owner);
    list = space == std::string_view::npos ? std::string_view() : list.substr(space + 1);
  }
}

/// Release (erase) or extend (a new expiry) of `op.owner`'s entry among `holders` (a semaphore's
/// permits, a lock's readers): kOk with how many are left, or `o` unchanged if it has none.
Outcome releaseOrExtendHolder(std::map<std::string, int64_t, std::less<>>& holders,
                              const Operation& op, int64_t now_us, Outcome o) {
  auto holder = holders.find(op.owner);
  if (holder == holders.end()) return o;
  o.code = OutcomeCode::kOk;
  if (op.verb == Verb::kRelease) {
    holders.erase(holder);
  } else {
    holder->second = now_us + op.ttl_ms * 1000;
    o.validity_ms = op.ttl_ms;
  }
  o.used = static_cast<int64_t>(holders.size());
  return o;
}

/// Records `op.holder` as the label of lease `op.owner` among `leases` (none: forgets an older
/// one), and forgets the labels of leases that are gone.
void recordLabel(const std::map<std::string, int64_t, std::less<>>& leases,
                 std::map<std::string, LeaseHolder, std::less<>>& labels, const Operation& op) {
  std::erase_if(labels, [&leases](const auto& l) { return !leases.contains(l.first); });
  if (op.holder.empty()) {
    if (auto it = labels.find(op.owner); it != labels.end()) labels.erase(it);
    return;
  }
  labels[std::string(op.owner)] = LeaseHolder{std::string(op.holder), unixNowMs(), 0};
}

/// The labelled live leases among `leases`, soonest expiry first, at most kMaxListedHolders.
std::vector<LeaseHolder> listLabels(const std::map<std::string, int64_t, std::less<>>& leases,
                                    const std::map<std::string, LeaseHolder, std::less<>>& labels,
                                    int64_t now_us) {
  std::vector<std::pair<int64_t, const LeaseHolder*>> live;
  for (const auto& [owner, expiry] : leases) {
    auto l = labels.find(owner);
    if (expiry > now_us && l != labels.end()) live.emplace_back(expiry, &l->second);
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LeaseHolder> out;
  for (const auto& [expiry, l] : live) {
    if (out.size() >= static_cast<size_t>(kMaxListedHolders)) break;
    out.push_back(LeaseHolder{l->holder, l->since_ms, remainingMs(expiry, now_us)});
  }
  return out;
}

/// The answer to a verb a kind does not serve (the lock service never sends one).
Status notServed(const Operation& op, std::string_view kind) {
  return Status(StatusCode::kFailedPrecondition,
                std::string(verbName(op.verb)) + " is not served for " + std::string(kind));
}

}  // namespace

MemoryBackend::MemoryBackend(event::Scheduler& scheduler) : scheduler_(scheduler) {}

MemoryBackend::~MemoryBackend() = default;

void MemoryBackend::deliver(std::function<void()> fn) {
  scheduler_.post(alive_.guarded(std::move(fn)));
}

MemoryBackend::Entry* MemoryBackend::liveEntry(std::string_view name) {
  auto it = locks_.find(name);
  if (it == locks_.end()) return nullptr;
  Entry& e = it->second;
  if (e.owner.empty()) return nullptr;
  if (scheduler_.nowUs() >= e.expiry_us) {
    e.owner.clear();  // lazily expired; the token counter stays
    return nullptr;
  }
  return &e;
}

MemoryBackend::Entry* MemoryBackend::liveReaders(std::string_view name) {
  auto it = locks_.find(name);
  if (it == locks_.end() || it->second.readers.empty()) return nullptr;
  Entry& e = it->second;
  const int64_t now = scheduler_.nowUs();
  std::erase_if(e.readers, [now](const auto& r) { return r.second <= now; });
  if (!e.readers.empty()) return &e;
  return nullptr;
}

int64_t MemoryBackend::writerMarksUntilUs(Entry& e, int64_t now_us) {
  std::erase_if(e.writer_marks, [now_us](const auto& m) { return m.second <= now_us; });
  int64_t until = 0;
  for (const auto& [writer, mark_until] : e.writer_marks) until = std::max(until, mark_until);
  return until;
}

StatusOr<Outcome> MemoryBackend::withdrawWriter(const Operation& op) {
  Outcome o;
  auto it = locks_.find(op.name);
  if (it == locks_.end()) return o;
  Entry& e = it->second;
  writerMarksUntilUs(e, scheduler_.nowUs());
  auto mark = e.writer_marks.find(op.owner);
  if (mark == e.writer_marks.end()) return o;
  e.writer_marks.erase(mark);
  o.code = OutcomeCode::kOk;
  // The writers still queued on its sidecar keep readers out in its place.
  const int64_t until = scheduler_.nowUs() + std::max<int64_t>(1, op.writer_wait_ms) * 1000;
  forEachOwner(op.also_waiting,
               [&](std::string_view w) { e.writer_marks[std::string(w)] = until; });
  // The last mark gone from a lock no writer holds: readers kept out for it may come in.
  announce_withdraw_ = e.writer_marks.empty() && liveEntry(op.name) == nullptr;
  return o;
}

namespace {

int64_t lastReaderExpiryUs(const std::map<std::string, int64_t, std::less<>>& readers) {
  int64_t last = 0;
  for (const auto& [reader, expiry] : readers) last = std::max(last, expiry);
  return last;
}

}  // namespace

int64_t MemoryBackend::holderExpiryUs(const Entry* writer, const Entry* readers) {
  if (writer != nullptr) return writer->expiry_us;
  return readers != nullptr ? lastReaderExpiryUs(readers->readers) : 0;
}

void MemoryBackend::run(const Operation& op, OutcomeCallback cb) {
  StatusOr<Outcome> result = shut_down_ ? StatusOr<Outcome>(shutDownError()) : apply(op);
  // Announced, like the Redis scripts do (backend::announcement): a release when the lock became
  // free (a re-entered lease giving back one hold stays held; a reader leaving others behind
  // keeps it held) or a permit was given back; a force release; a grant of a lock, a hand-off and
  // an election's grant (news to event streams and observers, no waiter wakes); a proclaim.
  const bool ok = result.isOk() && result->ok();
  const bool freed = op.kind == LockKind::kSemaphore ? true
                     : op.kind == LockKind::kShared  ? result.isOk() && result->used == 0
                                                     : result.isOk() && result->holds == 0;
  std::string_view reason;
  if (ok && op.verb == Verb::kForceRelease && freed) {
    reason = announcement::kForced;
  } else if (ok && op.verb == Verb::kRelease && freed) {
    reason = announcement::kReleased;
  } else if (ok && op.verb == Verb::kProclaim) {
    reason = announcement::kProclaimed;
  } else if (ok && ((op.verb == Verb::kAcquire && op.kind != LockKind::kSemaphore &&
                     result->holds <= 1 && (op.kind != LockKind::kShared || result->used == 1)) ||
                    (op.verb == Verb::kHandOff && result->token != 0))) {
    // (a hand-off that only gave back one hold of a re-entered lease handed nothing on: as
    // release_grant.lua, it announces nothing)
    reason = announcement::kGranted;
  }
  if (std::exchange(announce_withdraw_, false)) reason = announcement::kReleased;
  deliver([cb = std::move(cb), result = std::move(result)]() mutable { cb(std::move(result)); });
  if (!reason.empty()) notifyReleased(op.name, reason);
}

void MemoryBackend::acquireAll(const std::vector<std::string>& names, std::string_view owner,
                               int64_t ttl_ms, std::string_view holder, AllOutcomeCallback cb) {
  StatusOr<AllOutcome> result = AllOutcome{};
  if (shut_down_) {
    result = shutDownError();
  } else {
    const int64_t now = scheduler_.nowUs();
    for (size_t i = 0; i < names.size() && !result->granted; ++i) {
      const Entry* writer = liveEntry(names[i]);
      int64_t holder_expiry_us =
          holderExpiryUs(writer, writer == nullptr ? liveReaders(names[i]) : nullptr);
      if (auto it = locks_.find(names[i]);
          holder_expiry_us == 0 && it != locks_.end() && it->second.delay_until_us > now) {
        holder_expiry_us = it->second.delay_until_us;  // a lock-delay runs: nothing is granted
      }
      if (holder_expiry_us == 0) continue;
      result->busy_index = i;
      result->holder_ttl_ms = remainingMs(holder_expiry_us, now);
      break;
    }
    if (result->holder_ttl_ms < 0) {
      result->granted = true;
      result->validity_ms = ttl_ms;
      for (const std::string& name : names) {
        Operation grant = Operation::acquire(name, owner, ttl_ms);
        grant.holder = holder;
        StatusOr<Outcome> one = apply(grant);
        if (!one.isOk()) {
          result = one.status();
          break;
        }
        result->tokens.push_back(one->token);
      }
    }
  }
  const bool granted = result.isOk() && result->granted;
  deliver([cb = std::move(cb), result = std::move(result)]() mutable { cb(std::move(result)); });
  if (granted) {  // each name's grant is news to its event streams (as acquire_all.lua)
    for (const std::string& name : names) notifyReleased(name, announcement::kGranted);
  }
}

StatusOr<Outcome> MemoryBackend::applySemaphore(const Operation& op) {
  const int64_t now = scheduler_.nowUs();
  Outcome o;
  auto it = semaphores_.find(op.name);
  if (it != semaphores_.end()) {
    std::erase_if(it->second.permits, [now](const auto& p) { return p.second <= now; });
  }
  const int64_t used =
      it == semaphores_.end() ? 0 : static_cast<int64_t>(it->second.permits.size());
  switch (op.verb) {
    case Verb::kAcquire: {
      if (op.ttl_ms <= 0 || op.owner.empty() || op.limit < 1) {
        return invalidArgument("ttl_ms and limit must be > 0 and the permit non-empty");
      }
      o.used = used;
      if (used > 0 && it->second.limit != op.limit) {
        o.code = OutcomeCode::kLimitMismatch;
        o.limit = it->second.limit;
        return o;
      }
      o.limit = op.limit;
      if (used >= op.limit) {
        int64_t first = INT64_MAX;
        for (const auto& [permit, expiry] : it->second.permits) first = std::min(first, expiry);
        o.code = OutcomeCode::kBusy;
        o.holder_ttl_ms = std::max<int64_t>(1, remainingMs(first, now));
        return o;
      }
      Semaphore& sem = semaphores_[std::string(op.name)];
      sem.limit = op.limit;
      sem.permits[std::string(op.owner)] = now + op.ttl_ms * 1000;
      recordLabel(sem.permits, sem.labels, op);
      o.code = OutcomeCode::kOk;
      o.token = ++sem.token;
      o.validity_ms = op.ttl_ms;
      o.used = used + 1;
      return o;
    }
    case Verb::kRelease:
    case Verb::kExtend: {
      if (op.verb == Verb::kExtend && op.ttl_ms <= 0) return invalidArgument("ttl_ms must be > 0");
      if (it == semaphores_.end()) return o;
      return releaseOrExtendHolder(it->second.permits, op, now, o);
    }
    case Verb::kInspect:
      o.token = it == semaphores_.end() ? 0 : it->second.token;
      if (used > 0) {
        o.code = OutcomeCode::kOk;
        o.used = used;
        o.limit = it->second.limit;
        o.holders = listLabels(it->second.permits, it->second.labels, now);
      }
      return o;
    case Verb::kHandOff:
    case Verb::kForceRelease:
    case Verb::kWithdraw:
    case Verb::kProclaim:
      break;
  }
  return notServed(op, "semaphores");
}

StatusOr<Outcome> MemoryBackend::applyShared(const Operation& op) {
  const int64_t now = scheduler_.nowUs();
  Outcome o;
  const Entry* writer = liveEntry(op.name);
  Entry* readers = liveReaders(op.name);
  const int64_t readers_ms =
      readers != nullptr ? remainingMs(lastReaderExpiryUs(readers->readers), now) : 0;
  const int64_t count = readers != nullptr ? static_cast<int64_t>(readers->readers.size()) : 0;
  switch (op.verb) {
    case Verb::kAcquire: {
      if (op.ttl_ms <= 0 || op.owner.empty()) {
        return invalidArgument("ttl_ms must be > 0 and owner non-empty");
      }
      if (writer != nullptr) {
        o.code = OutcomeCode::kBusy;
        o.holder_ttl_ms = remainingMs(writer->expiry_us, now);
        return o;
      }
      // A writer's lease that ended unreleased holds readers back for its lock-delay too.
      if (auto it = locks_.find(op.name);
          readers == nullptr && it != locks_.end() && it->second.delay_until_us > now) {
        o.code = OutcomeCode::kBusy;
        o.busy_reason = BusyReason::kLockDelay;
        o.holder_ttl_ms = std::max<int64_t>(1, remainingMs(it->second.delay_until_us, now));
        return o;
      }
      // A queued writer's mark turns new readers away, even from a free lock.
      if (auto it = locks_.find(op.name);
          it != locks_.end() && writerMarksUntilUs(it->second, now) > now) {
        const int64_t mark_ms = remainingMs(writerMarksUntilUs(it->second, now), now);
        o.code = OutcomeCode::kBusy;
        o.busy_reason = BusyReason::kWriterWaiting;
        o.used = count;
        o.holder_ttl_ms =
            readers != nullptr ? std::max<int64_t>(1, std::min(mark_ms, readers_ms)) : mark_ms;
        return o;
      }
      if (readers != nullptr) {
        o.used = count;
        if (readers->readers.contains(op.owner)) {
          o.code = OutcomeCode::kBusy;
          o.busy_reason = BusyReason::kHeldByYou;
          o.holder_ttl_ms = readers_ms;
          return o;
        }
      }
      Entry& e = locks_[std::string(op.name)];
      e.readers[std::string(op.owner)] = now + op.ttl_ms * 1000;
      recordLabel(e.readers, e.reader_labels, op);
      o.code = OutcomeCode::kOk;
      o.token = ++e.token;
      o.validity_ms = op.ttl_ms;
      o.used = static_cast<int64_t>(e.readers.size());
      return o;
    }
    case Verb::kRelease:
    case Verb::kExtend: {
      if (op.verb == Verb::kExtend && op.ttl_ms <= 0) return invalidArgument("ttl_ms must be > 0");
      if (readers == nullptr) return o;
      return releaseOrExtendHolder(readers->readers, op, now, o);
    }
    case Verb::kInspect:
      if (auto it = locks_.find(op.name); it != locks_.end()) o.token = it->second.token;
      if (writer != nullptr) {
        o.code = OutcomeCode::kOk;
        o.validity_ms = remainingMs(writer->expiry_us, now);
        o.holder = writer->holder;
        o.since_ms = writer->since_ms;
      } else if (readers != nullptr) {
        o.code = OutcomeCode::kOk;
        o.validity_ms = readers_ms;
        o.used = count;
        o.holders = listLabels(readers->readers, readers->reader_labels, now);
      }
      return o;
    case Verb::kHandOff:
    case Verb::kForceRelease:
    case Verb::kWithdraw:
    case Verb::kProclaim:
      break;
  }
  return notServed(op, "readers");
}

StatusOr<Outcome> MemoryBackend::applyFair(const Operation& op) {
  const int64_t now = scheduler_.nowUs();
  Entry& e = locks_[std::string(op.name)];
  std::erase_if(e.fair_queue,
                [now](const Entry::FairWaiter& w) { return w.claim_until_us <= now; });
  const Entry* writer = liveEntry(op.name);
  const int64_t holder_expiry_us =
      holderExpiryUs(writer, writer == nullptr ? liveReaders(op.name) : nullptr);
  const bool free = holder_expiry_us == 0;
  auto position = [&e](std::string_view owner) {
    return std::find_if(e.fair_queue.begin(), e.fair_queue.end(),
                        [owner](const Entry::FairWaiter& w) { return w.owner == owner; });
  };
  Outcome o;
  if (op.verb == Verb::kWithdraw) {
    auto it = position(op.owner);
    if (it == e.fair_queue.end()) return o;
    const bool was_first = it == e.fair_queue.begin();
    e.fair_queue.erase(it);
    announce_withdraw_ = was_first && free;
    o.code = OutcomeCode::kOk;
    return o;
  }
  if (op.ttl_ms <= 0 || op.owner.empty()) {
    return invalidArgument("ttl_ms must be > 0 and owner non-empty");
  }
  if (op.claim_ms > 0) {
    auto join = [&](std::string_view w) {
      auto it = position(w);
      if (it == e.fair_queue.end()) {
        e.fair_queue.push_back({std::string(w), 0});
        it = e.fair_queue.end() - 1;
      }
      it->claim_until_us = now + op.claim_ms * 1000;
    };
    join(op.owner);
    forEachOwner(op.also_waiting, join);
  }
  if (free && e.delay_until_us > now) {  // a waiter keeps its place through the delay
    o.code = OutcomeCode::kBusy;
    o.busy_reason = BusyReason::kLockDelay;
    o.holder_ttl_ms = std::max<int64_t>(1, remainingMs(e.delay_until_us, now));
    return o;
  }
  const bool our_turn = e.fair_queue.empty() || e.fair_queue.front().owner == op.owner;
  if (our_turn && free) {
    if (auto it = position(op.owner); it != e.fair_queue.end()) e.fair_queue.erase(it);
    Operation grant = Operation::acquire(op.name, op.owner, op.ttl_ms);
    grant.holder = op.holder;
    grant.lock_delay_ms = op.lock_delay_ms;
    return apply(grant);
  }
  // Held: until the holder lets go; free but another's turn: until the first waiter's claim.
  o.code = OutcomeCode::kBusy;
  if (writer != nullptr && writer->owner == op.owner) o.busy_reason = BusyReason::kHeldByYou;
  if (writer != nullptr) {
    o.holder = writer->holder;
    o.since_ms = writer->since_ms;
  }
  o.holder_ttl_ms =
      free ? std::max<int64_t>(1, remainingMs(e.fair_queue.front().claim_until_us, now))
           : remainingMs(holder_expiry_us, now);
  return o;
}

StatusOr<Outcome> MemoryBackend::applyElection(const Operation& op) {
  const int64_t now = scheduler_.nowUs();
  Outcome o;
  auto it = elections_.find(op.name);
  Election* held = nullptr;
  if (it != elections_.end() && !it->second.owner.empty()) {
    if (now < it->second.expiry_us) {
      held = &it->second;
    } else {
      it->second.owner.clear();  // lazily expired; the term counter stays
    }
  }
  // The owner check of renew, resign and proclaim (extend.lua, release.lua,
  // election_proclaim.lua): nobody leads, or another does.
  auto refused = [&]() -> std::optional<Outcome> {
    if (held == nullptr) return o;
    if (held->owner == op.owner) return std::nullopt;
    o.code = OutcomeCode::kNotOwner;
    o.holder_ttl_ms = remainingMs(held->expiry_us, now);
    return o;
  };
  switch (op.verb) {
    case Verb::kAcquire: {
      if (op.ttl_ms <= 0 || op.owner.empty()) {
        return invalidArgument("ttl_ms must be > 0 and owner non-empty");
      }
      if (held != nullptr) {  // no re-entry: the leader's own campaign is busy too
        o.code = OutcomeCode::kBusy;
        if (held->owner == op.owner) o.busy_reason = BusyReason::kHeldByYou;
        o.holder_ttl_ms = remainingMs(held->expiry_us, now);
        return o;
      }
      Election& e = elections_[std::string(op.name)];
      e.owner.assign(op.owner);
      e.expiry_us = now + op.ttl_ms * 1000;
      e.leader = LeaderRecord{};
      e.leader.candidate = op.candidate;
      e.leader.value = op.value;
      e.leader.since_ms = scheduler_.wallClockMs();
      o.code = OutcomeCode::kOk;
      o.token = ++e.token;
      o.validity_ms = op.ttl_ms;
      o.holds = 1;
      o.leader.since_ms = e.leader.since_ms;
      return o;
    }
    case Verb::kExtend:
      if (op.ttl_ms <= 0) return invalidArgument("ttl_ms must be > 0");
      if (auto refusal = refused()) return *refusal;
      held->expiry_us = now + op.ttl_ms * 1000;
      o.code = OutcomeCode::kOk;
      o.validity_ms = op.ttl_ms;
      o.holds = 1;
      return o;
    case Verb::kRelease:
      if (auto refusal = refused()) return *refusal;
      held->owner.clear();
      held->leader = LeaderRecord{};
      o.code = OutcomeCode::kOk;
      return o;
    case Verb::kProclaim:
      if (auto refusal = refused()) return *refusal;
      held->leader.value.assign(op.value);
      o.code = OutcomeCode::kOk;
      o.token = held->token;
      o.validity_ms = remainingMs(held->expiry_us, now);
      o.holds = 1;
      return o;
    case Verb::kInspect:
      if (it != elections_.end()) o.token = it->second.token;
      if (held != nullptr) {
        o.code = OutcomeCode::kOk;
        o.validity_ms = remainingMs(held->expiry_us, now);
        o.leader = held->leader;
      }
      return o;
    case Verb::kHandOff:
    case Verb::kForceRelease:
    case Verb::kWithdraw:
      break;
  }
  return notServed(op, "elections");
}

StatusOr<Outcome> MemoryBackend::apply(const Operation& op) {
  if (op.kind == LockKind::kSemaphore) return applySemaphore(op);
  if (op.kind == LockKind::kElection) return applyElection(op);
  if (op.kind == LockKind::kShared) return applyShared(op);
  if (op.kind == LockKind::kFair) {
    // The queue's verbs; every other verb of a fair lock is the mutex's (the same lease).
    if (op.verb == Verb::kAcquire || op.verb == Verb::kWithdraw) return applyFair(op);
    return apply(op.of(LockKind::kMutex));
  }
  const int64_t now = scheduler_.nowUs();
  Outcome o;
  Entry* held = liveEntry(op.name);
  // Readers hold the lock like one owner that is never the caller (a writer is the mutex holder).
  Entry* readers = held == nullptr ? liveReaders(op.name) : nullptr;
  const int64_t holder_expiry_us = holderExpiryUs(held, readers);
  // Held by somebody else: busy for acquire, not the owner for the owner-checked verbs.
  auto heldByOther = [&](OutcomeCode code) {
    o.code = code;
    o.holder_ttl_ms = remainingMs(holder_expiry_us, now);
    if (held != nullptr) {
      o.holder = held->holder;
      o.since_ms = held->since_ms;
    }
    return o;
  };
  switch (op.verb) {
    case Verb::kAcquire: {
      if (op.ttl_ms <= 0 || op.owner.empty()) {
        return invalidArgument("ttl_ms must be > 0 and owner non-empty");
      }
      if (held != nullptr && op.reentrant && held->owner == op.owner) {
        // Re-entry: one more hold, same token, a TTL never shorter than what is left.
        held->holds += 1;
        held->expiry_us = std::max(held->expiry_us, now + op.ttl_ms * 1000);
        held->delay_until_us = held->delay_ms > 0 ? held->expiry_us + held->delay_ms * 1000 : 0;
        o.code = OutcomeCode::kOk;
        o.token = held->token;
        o.validity_ms = remainingMs(held->expiry_us, now);
        o.holds = held->holds;
        return o;
      }
      if (held != nullptr) {
        if (held->owner == op.owner) o.busy_reason = BusyReason::kHeldByYou;
        return heldByOther(OutcomeCode::kBusy);
      }
      if (readers != nullptr) {
        if (op.writer_wait_ms > 0) {
          writerMarksUntilUs(*readers, now);
          readers->writer_marks[std::string(op.owner)] = now + op.writer_wait_ms * 1000;
          o.writer_marked = true;
        }
        return heldByOther(OutcomeCode::kBusy);
      }
      Entry& e = locks_[std::string(op.name)];
      if (e.delay_until_us > now) {  // the last lease ended unreleased: its lock-delay runs
        o.code = OutcomeCode::kBusy;
        o.busy_reason = BusyReason::kLockDelay;
        o.holder_ttl_ms = std::max<int64_t>(1, remainingMs(e.delay_until_us, now));
        return o;
      }
      e.owner.assign(op.owner);
      e.expiry_us = now + op.ttl_ms * 1000;
      e.token += 1;
      e.holds = 1;
      e.holder.assign(op.holder);
      e.since_ms = unixNowMs();
      e.delay_ms = std::max<int64_t>(0, op.lock_delay_ms);
      e.delay_until_us = e.delay_ms > 0 ? e.expiry_us + e.delay_ms * 1000 : 0;
      if (op.writer_wait_ms > 0) e.writer_marks.clear();  // a queued writer got in
      o.code = OutcomeCode::kOk;
      o.token = e.token;
      o.validity_ms = op.ttl_ms;
      o.holds = 1;
      return o;
    }
    case Verb::kRelease:
      if (readers != nullptr) return heldByOther(OutcomeCode::kNotOwner);
      if (held == nullptr) return o;
      if (held->owner != op.owner) return heldByOther(OutcomeCode::kNotOwner);
      o.code = OutcomeCode::kOk;
      if (held->holds > 1) {
        o.holds = --held->holds;
        o.validity_ms = remainingMs(held->expiry_us, now);
        return o;
      }
      held->owner.clear();
      // A clean release clears the lock-delay; an involuntary one starts it now.
      held->delay_until_us = op.involuntary && held->delay_ms > 0 ? now + held->delay_ms * 1000 : 0;
      return o;
    case Verb::kHandOff:
      if (op.ttl_ms <= 0 || op.next_owner.empty()) {
        return invalidArgument("next ttl_ms must be > 0 and next owner non-empty");
      }
      if (readers != nullptr) return heldByOther(OutcomeCode::kNotOwner);
      if (held == nullptr) return o;
      if (held->owner != op.owner) return heldByOther(OutcomeCode::kNotOwner);
      o.code = OutcomeCode::kOk;
      if (held->holds > 1) {  // one hold given back, nothing handed on
        o.holds = --held->holds;
        o.validity_ms = remainingMs(held->expiry_us, now);
        return o;
      }
      held->owner.assign(op.next_owner);
      held->holder.assign(op.holder);  // the next owner's label (as in release_grant.lua)
      held->since_ms = unixNowMs();
      held->expiry_us = now + op.ttl_ms * 1000;
      held->token += 1;
      held->delay_ms = std::max<int64_t>(0, op.lock_delay_ms);
      held->delay_until_us = held->delay_ms > 0 ? held->expiry_us + held->delay_ms * 1000 : 0;
      o.token = held->token;
      o.validity_ms = op.ttl_ms;
      o.holds = 1;
      return o;
    case Verb::kExtend:
      if (op.ttl_ms <= 0) return invalidArgument("ttl_ms must be > 0");
      if (readers != nullptr) return heldByOther(OutcomeCode::kNotOwner);
      if (held == nullptr) return o;
      if (held->owner != op.owner) return heldByOther(OutcomeCode::kNotOwner);
      held->expiry_us = now + op.ttl_ms * 1000;
      if (held->delay_ms > 0) held->delay_until_us = held->expiry_us + held->delay_ms * 1000;
      o.code = OutcomeCode::kOk;
      o.validity_ms = op.ttl_ms;
      o.holds = held->holds;
      return o;
    case Verb::kInspect:
      if (held != nullptr || readers != nullptr) {
        Entry& e = held != nullptr ? *held : *readers;
        o.code = OutcomeCode::kOk;
        o.validity_ms = remainingMs(holder_expiry_us, now);
        o.token = e.token;
        if (held != nullptr) {
          o.holder = held->holder;
          o.since_ms = held->since_ms;
        }
      } else if (auto it = locks_.find(op.name); it != locks_.end()) {
        o.token = it->second.token;
      }
      return o;
    case Verb::kForceRelease:
      if (held != nullptr || readers != nullptr) {
        Entry& e = held != nullptr ? *held : *readers;
        if (held != nullptr) {  // the lease's lock-delay runs from now (as force_release.lua)
          e.delay_until_us = e.delay_ms > 0 ? now + e.delay_ms * 1000 : 0;
          o.validity_ms = e.delay_ms;
        }
        e.owner.clear();
        e.readers.clear();  // (a writer's mark stays: it is the writer's)
        o.code = OutcomeCode::kOk;
        o.token = e.token;
      } else if (auto it = locks_.find(op.name); it != locks_.end()) {
        o.token = it->second.token;
      }
      return o;
    case Verb::kWithdraw:
      return withdrawWriter(op);
    case Verb::kProclaim:
      return notServed(op, lockKindName(op.kind));
  }
  return invalidArgument("unknown operation");
}

void MemoryBackend::scanHolders(const HolderScan& scan, ScanCallback cb) {
  ScannedNames found;
  std::vector<std::string> names;
  for (const auto& [name, e] : locks_) {
    if (name.starts_with(scan.prefix) && !e.holder.empty()) names.push_back(name);
  }
  for (std::string& name : names) {
    if (liveEntry(name) != nullptr) keepScannedName(&found, std::move(name), scan.keep);
  }
  deliver([cb = std::move(cb), found = std::move(found)]() mutable { cb(std::move(found)); });
}

void MemoryBackend::watchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it == watches_.end()) {
    watches_.emplace(std::string(name), 1);
  } else {
    ++it->second;
  }
}

void MemoryBackend::unwatchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it == watches_.end()) return;
  if (--it->second <= 0) watches_.erase(it);
}

void MemoryBackend::notifyReleased(std::string_view name, std::string_view reason) {
  if (!listener_ || watches_.find(name) == watches_.end()) return;
  deliver([this, name = std::string(name), reason] {
    // Re-check: the watch may have ended (queue emptied) between release and delivery.
    if (listener_ && watches_.find(name) != watches_.end()) listener_(name, reason);
  });
}

void MemoryBackend::forceDelete(std::string_view name, LockKind kind) {
  if (kind == LockKind::kElection) {
    if (auto it = elections_.find(name); it != elections_.end()) it->second.owner.clear();
    return;
  }
  if (Entry* held = liveEntry(name)) held->owner.clear();
}

void MemoryBackend::forceOwner(std::string_view name, std::string_view owner) {
  if (Entry* held = liveEntry(name)) held->owner.assign(owner);
}

BackendHealth MemoryBackend::health() const {
  BackendHealth h;
  h.ready = !shut_down_;
  if (shut_down_) h.reason = "shut down";
  NodeHealth node;
  node.address = "memory";
  node.up = !shut_down_;
  node.reason = h.reason;
  h.nodes.push_back(std::move(node));
  return h;
}

void MemoryBackend::shutdown(std::function<void()> done) {
  shut_down_ = true;
  deliver(std::move(done));
}

}  // namespace sidelock::backend
