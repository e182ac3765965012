#include "api/election_observers.h"

#include <algorithm>
#include <utility>

#include "api/json_object.h"
#include "common/log.h"

namespace sidelock::api {

std::string observeEvent(std::string_view name, const LeaderView& view) {
  JsonObject event;
  if (!view.held) return event.text("event", "no_leader").text("name", name).finish();
  // Keys in sorted order after "event" (JsonObject, like the grant answers).
  return event.text("event", "leader")
      .text("candidate", view.candidate)
      .text("name", name)
      .unsignedInteger("term", view.term)
      .integer("ttl_ms", view.ttl_ms)
      .text("value", view.value)
      .finish();
}

ElectionObservers::ElectionObservers(lock::LockService& service, event::Scheduler& scheduler,
                                     metrics::Metrics& metrics, int64_t reread_ms)
    : scheduler_(scheduler),
      metrics_(metrics),
      groups_(
          service, scheduler, lock::LockKind::kElection, reread_ms,
          [this](Groups::Group& g, StatusOr<lock::LockState> state) {
            return onRead(g, std::move(state));
          },
          nullptr,
          [this](size_t streams) {
            metrics_.election_observers.Set(static_cast<double>(streams));
          }) {}

ElectionObservers::~ElectionObservers() = default;

void ElectionObservers::add(const std::string& name, http::ResponderPtr stream,
                            StatusOr<lock::LockState> first_read) {
  Groups::Group& g = groups_.groupOf(name, &first_read);
  Observer* o = groups_.addWatcher(g, Observer{std::move(stream)});
  if (o == nullptr || !g.known) return;
  // The newcomer's first line: the leader, or `unknown` while the one last read is past
  // vouching for.
  if (g.unknown) {
    o->stream->writeChunk(unknownLine(g));
    return;
  }
  // What is left of the leader's lease now, not the TTL the last read saw.
  LeaderView now = g.state.view;
  if (now.held) now.ttl_ms = std::max<int64_t>(0, now.deadline_ms - scheduler_.nowMs());
  o->stream->writeChunk(observeEvent(name, now));
}

std::string ElectionObservers::unknownLine(const Groups::Group& g) {
  JsonObject unknown;
  unknown.text("event", "unknown").text("name", g.name);
  if (g.state.highest_term > 0) unknown.unsignedInteger("term", g.state.highest_term);
  return unknown.finish();
}

void ElectionObservers::listen(const std::string& name,
                               std::function<void(const LeaderView&)> on_read) {
  Groups::Group& g = groups_.groupOf(name);
  g.pinned = true;  // no group is erased while it has listeners
  g.state.listeners.push_back(std::move(on_read));
  // A group already known answers the newcomer with its next read, made now.
  if (g.known) groups_.readNow(g);
}

int64_t ElectionObservers::onRead(Groups::Group& g, StatusOr<lock::LockState> state) {
  int64_t next_read_ms = groups_.rereadMs();
  // (The lock service also notifies watchers when the backend comes back: a read then.)
  if (!state.isOk()) return onReadFailed(g, state.status());
  const int64_t now = scheduler_.nowMs();
  LeaderView next;
  next.held = state->held;
  if (next.held) {
    next.term = state->token;
    next.candidate = std::move(state->leader.candidate);
    next.value = std::move(state->leader.value);
    next.ttl_ms = state->ttl_ms;
    next.deadline_ms = now + state->ttl_ms;
    // Read again right after this lease would run out: a leader that dies announces nothing.
    next_read_ms = std::min(next_read_ms, next.ttl_ms + 1);
  }
  // Stale: it vouches for nothing (a stream that said `unknown` stays so).
  if (next.held && next.term < g.state.highest_term) return next_read_ms;
  g.state.highest_term = std::max(g.state.highest_term, next.term);
  // After `unknown` the state read is sent, changed or not.
  const bool changed =
      !g.known || std::exchange(g.unknown, false) || !g.state.view.sameLeader(next);
  g.known = true;
  g.state.view = std::move(next);
  if (changed) {
    const std::string line = observeEvent(g.name, g.state.view);
    for (const Observer& o : g.watchers) o.stream->writeChunk(line);
  }
  // Copied: a listener may add one.
  const auto listeners = g.state.listeners;
  for (const auto& on_read : listeners) on_read(g.state.view);
  return next_read_ms;
}

int64_t ElectionObservers::onReadFailed(Groups::Group& g, const Status& error) {
  SL_LOG(kDebug, "election.observe_read_failed", {"name", g.name}, {"error", error.message()});
  int64_t next_read_ms = 0;
  const LeaderView& view = g.state.view;
  if (!groups_.turnsUnknown(g, view.held, view.deadline_ms, next_read_ms)) return next_read_ms;
  SL_LOG(kWarn, "election.observe_unknown", {"name", g.name}, {"error", error.message()});
  const std::string line = unknownLine(g);
  for (const Observer& o : g.watchers) o.stream->writeChunk(line);
  return next_read_ms;
}

}  // namespace sidelock::api
