#include "api/lock_events.h"

#include <algorithm>
#include <utility>

#include "api/json_object.h"
#include "common/log.h"

namespace sidelock::api {

namespace {

/// A lease whose end (now + TTL, as read) moved later by more than this is `extended`: smaller
/// moves are the read's own round trip (and a lease gone this close to its end expired).
constexpr int64_t kExtendSlackMs = 50;

}  // namespace

LockEvents::LockEvents(lock::LockService& service, event::Scheduler& scheduler,
                       metrics::Metrics& metrics, int64_t reread_ms)
    : scheduler_(scheduler),
      metrics_(metrics),
      // Read as the readers' kind, like GET /v1/locks/{name}: it also tells readers from a writer.
      groups_(
          service, scheduler, lock::LockKind::kShared, reread_ms,
          [this](Groups::Group& g, StatusOr<lock::LockState> state) {
            return onRead(g, std::move(state));
          },
          [](Groups::Group& g, lock::ChangeReason reason) { noteAnnounced(g.state, reason); },
          [this](size_t streams) {
            metrics_.lock_event_streams.Set(static_cast<double>(streams));
          }) {}

LockEvents::~LockEvents() = default;

void LockEvents::add(const std::string& name, http::ResponderPtr stream, bool with_extended) {
  Groups::Group& g = groups_.groupOf(name);
  Watcher* w = groups_.addWatcher(g, Watcher{std::move(stream), with_extended});
  if (w == nullptr) return;  // answered already (HEAD)
  if (!g.known) return;
  if (firstLineWaits(g)) {
    // The lease shown has reached its end, and no read has told what became of it yet (one is
    // due, or in flight on a slow backend): `held` would be stale, `expired` a guess. The first
    // line waits for that read.
    w->awaiting_first = true;
    groups_.readNow(g);
    return;
  }
  writeFirstLine(g, *w);  // the others had theirs
}

bool LockEvents::firstLineWaits(const Groups::Group& g) const {
  const View& view = g.state.view;
  return !g.unknown && view.held && scheduler_.nowMs() >= view.deadline_ms - kExtendSlackMs;
}

void LockEvents::writeFirstLine(const Groups::Group& g, const Watcher& w) {
  // The state, or `unknown` while what the group last read is past vouching for.
  if (g.unknown) {
    w.stream->writeChunk(unknownLine(g));
  } else {
    // What is left of the lease now, not the TTL the last read saw (up to reread_ms ago).
    View now = g.state.view;
    if (now.held) now.ttl_ms = std::max<int64_t>(0, now.deadline_ms - scheduler_.nowMs());
    w.stream->writeChunk(eventLine(g.name, "state", now));
  }
  metrics_.lock_events_sent_total.Add({{"type", g.unknown ? "unknown" : "state"}}).Increment();
}

void LockEvents::sendFirstLines(Groups::Group& g) {
  // Still past the shown lease's end after a stale or failed read: the next read.
  if (firstLineWaits(g)) return;
  for (Watcher& w : g.watchers) {
    if (!w.awaiting_first) continue;
    w.awaiting_first = false;
    writeFirstLine(g, w);
  }
}

void LockEvents::noteAnnounced(State& s, lock::ChangeReason reason) {
  if (reason == lock::ChangeReason::kForced) {
    s.end = EndAnnounced::kForced;
  } else if (reason == lock::ChangeReason::kReleased && s.end == EndAnnounced::kNone) {
    s.end = EndAnnounced::kReleased;
  }
  // A grant (or a catch-up) ends nothing: the read it causes shows the new lease. Nor does a
  // Redlock acquire's clean-up (kRolledBack): the key it deleted was no lease anybody was
  // granted, and a lease that ends after it did not end by a release. For readers it
  // tells a new shared hold from the old one (onRead): only the first reader of a free lock
  // announces a grant, so one announced since the last read means the lock was free meanwhile
  // (its last reader released, or ran out, which announces nothing).
  if (reason == lock::ChangeReason::kGranted) s.regranted = true;
  if (reason == lock::ChangeReason::kCatchUp) s.missed = true;
}

int64_t LockEvents::onRead(Groups::Group& g, StatusOr<lock::LockState> state) {
  const int64_t next_read_ms = applyRead(g, std::move(state));
  sendFirstLines(g);
  return next_read_ms;
}

int64_t LockEvents::applyRead(Groups::Group& g, StatusOr<lock::LockState> state) {
  int64_t next_read_ms = groups_.rereadMs();
  if (!state.isOk()) return onReadFailed(g, state.status());
  const int64_t now = scheduler_.nowMs();
  // After `unknown`, a read that answers sends its events (an end, a grant it shows) and then a
  // `state` line; a stale answer (below) vouches for nothing and leaves the stream unknown.
  const bool was_unknown = g.unknown;
  View next;
  next.held = state->held;
  next.token = state->token;
  if (next.held) {
    next.ttl_ms = state->ttl_ms;
    next.deadline_ms = now + state->ttl_ms;
    next.shared = state->used > 0;
    next.readers = state->used;
    next.holder = std::move(state->holder);
    next.since_ms = state->since_ms;
    // Read again right after this lease would run out: an expiry announces nothing.
    next_read_ms = std::min(next_read_ms, next.ttl_ms + 1);
  }
  State& s = g.state;
  if (!g.known) {
    g.known = true;
    s.end = EndAnnounced::kNone;
    s.missed = false;
    s.view = next;
    send(g, "state", next);
    return next_read_ms;
  }
  if (next.token < s.view.token) {
    // A stale answer (Redlock: a free lock read while a node of the last grant did not answer may
    // name a token before it): never go backwards, and keep what was announced for the next read.
    // But a lease read gone past the end its last read gave it has ended whatever token the read
    // names: Redis restarted empty (its counter gone, token 0), or a Redlock node of the grant
    // that stays away. It ends then (`expired` unless announced) under its own token; before
    // then, read again right after that end.
    if (next.held) return next_read_ms;
    if (!s.view.held) {
      // Free as the stream says (Redis restarted empty: its counter starts again): that much it
      // vouches for, which ends an `unknown`.
      if (was_unknown) {
        g.unknown = false;
        send(g, "state", s.view);
      }
      return next_read_ms;
    }
    if (now < s.view.deadline_ms - kExtendSlackMs) {
      return std::min(next_read_ms, s.view.deadline_ms - now + 1);
    }
    next.token = s.view.token;
  }
  const EndAnnounced end = std::exchange(s.end, EndAnnounced::kNone);
  const bool regranted = std::exchange(s.regranted, false);
  const bool missed = std::exchange(s.missed, false);
  const View prev = s.view;
  // Another lease: another token, or readers where a writer held it (or the other way round),
  // whatever the tokens say. But readers read again are one shared hold whatever the token: each
  // reader draws a token (the read names the latest) and only the first reader of a free lock is
  // announced, so readers come and gone while others stayed are no end. The hold ended only if
  // announced: forced, or a grant (a first reader in, after the last one left or ran out). A
  // release alone is no proof: a writer that gives up waiting announces one while readers hold.
  const bool readers_stayed = prev.held && prev.shared && next.held && next.shared &&
                              end != EndAnnounced::kForced && !regranted;
  const bool ended = prev.held && (!next.held || next.shared != prev.shared ||
                                   (next.token != prev.token && !readers_stayed));
  // How a lease ended: as announced; with nothing announced, at its TTL: expired. The deadline
  // is this sidecar's estimate (the loop's clock, read when the answer came): a lease gone within
  // the slack before it ran out, not released, expired.
  std::string_view reason = "released";
  if (end == EndAnnounced::kForced) {
    reason = "forced";
  } else if (end == EndAnnounced::kNone && now >= prev.deadline_ms - kExtendSlackMs) {
    reason = "expired";
  }
  if (ended) {
    View gone = prev;
    gone.held = false;
    gone.ttl_ms = 0;
    send(g, reason, gone);
  }
  if (!next.held && !prev.held && next.token > prev.token) {
    // A whole lease came and went between two reads (its grant announcement missed, or both
    // announcements in one read's window): its grant and its end, in token order. `acquired`
    // says held, as every `acquired` line does, with what the read knows of the lease (its
    // token; not its holder or TTL). Its end as announced; with nothing announced, `expired`
    // (a release is announced), unless announcements may have been missed meanwhile: then
    // nothing tells a release from an expiry (a grant given back while this sidecar's link was
    // down), and the stream says `ended`.
    View lease = next;
    lease.held = true;
    send(g, "acquired", lease);
    std::string_view came_and_went = reason;
    if (end == EndAnnounced::kNone) came_and_went = missed ? "ended" : "expired";
    send(g, came_and_went, next);
  }
  if (next.held && (!prev.held || ended)) {
    send(g, "acquired", next);
  } else if (next.held && next.deadline_ms > prev.deadline_ms + kExtendSlackMs) {
    send(g, "extended", next);
  }
  // An unchanged lease keeps its first deadline, so that small moves do not add up; the rest of
  // the read (readers' latest token and count) is taken. An end that moved earlier (an extend to
  // a shorter TTL; readers: the longest one left) is taken, so that running out then is
  // `expired`, not `released`.
  if (next.held && prev.held && !ended && next.deadline_ms <= prev.deadline_ms + kExtendSlackMs &&
      next.deadline_ms >= prev.deadline_ms - kExtendSlackMs) {
    next.deadline_ms = prev.deadline_ms;
    next.ttl_ms = prev.ttl_ms;
  }
  s.view = std::move(next);
  if (was_unknown) {
    g.unknown = false;
    send(g, "state", s.view);
  }
  return next_read_ms;
}

int64_t LockEvents::onReadFailed(Groups::Group& g, const Status& error) {
  SL_LOG(kDebug, "lock.events_read_failed", {"name", g.name}, {"error", error.message()});
  g.state.missed = true;  // what could not be read was likely not heard either
  int64_t next_read_ms = 0;
  const View& view = g.state.view;
  if (!groups_.turnsUnknown(g, view.held, view.deadline_ms, next_read_ms)) return next_read_ms;
  SL_LOG(kWarn, "lock.events_unknown", {"name", g.name}, {"error", error.message()});
  sendLine(g, "unknown", unknownLine(g));
  return next_read_ms;
}

std::string LockEvents::unknownLine(const Groups::Group& g) {
  return JsonObject()
      .text("event", "unknown")
      .text("name", g.name)
      .unsignedInteger("token", g.state.view.token)
      .finish();
}

std::string LockEvents::eventLine(std::string_view name, std::string_view type, const View& view) {
  JsonObject line;
  line.text("event", type).boolean("held", view.held);
  if (view.held && !view.holder.empty()) line.text("holder", view.holder);
  if (view.held) line.text("mode", view.shared ? "shared" : "exclusive");
  line.text("name", name);
  if (view.held && view.shared) line.integer("readers", view.readers);
  if (view.held && view.since_ms > 0) line.integer("since_ms", view.since_ms);
  return line.unsignedInteger("token", view.token)
      .integer("ttl_ms", view.held ? view.ttl_ms : 0)
      .finish();
}

void LockEvents::send(Groups::Group& g, std::string_view type, const View& view) {
  sendLine(g, type, eventLine(g.name, type, view));
}

void LockEvents::sendLine(Groups::Group& g, std::string_view type, const std::string& text) {
  const bool extended = type == "extended";
  double sent = 0;
  for (const Watcher& w : g.watchers) {
    if (extended && !w.with_extended) continue;
    if (w.awaiting_first) continue;  // it never saw what this line changes
    w.stream->writeChunk(text);
    ++sent;
  }
  metrics_.lock_events_sent_total.Add({{"type", std::string(type)}}).Increment(sent);
}

}  // namespace sidelock::api
