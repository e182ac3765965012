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
    : service_(service),
      scheduler_(scheduler),
      metrics_(metrics),
      reread_ms_(std::max<int64_t>(1, reread_ms)) {}

ElectionObservers::~ElectionObservers() = default;

ElectionObservers::Group* ElectionObservers::find(const std::string& name, uint64_t id) {
  auto it = groups_.find(name);
  if (it == groups_.end() || it->second->id != id) return nullptr;  // gone (or a newer group)
  return it->second.get();
}

ElectionObservers::Group& ElectionObservers::groupOf(const std::string& name,
                                                     StatusOr<lock::LockState>* seed) {
  auto [it, created] = groups_.try_emplace(name);
  if (!created) return *it->second;
  it->second = std::make_unique<Group>();
  Group& g = *it->second;
  g.id = ++next_group_id_;
  g.name = name;
  g.watch = service_.watchChanges(name, alive_.guarded([this, name, id = g.id] {
    Group* found = find(name, id);
    if (found == nullptr) return;
    if (found->reading) {
      found->read_again = true;
      return;
    }
    read(*found);
  }));
  if (seed == nullptr || !seed->isOk()) {
    read(g);
    return g;
  }
  // The caller's read stands for the group's first: it is taken as if it had just answered, so
  // the re-reads that catch up on a change announced before the watch was in place (every
  // reread_ms, and when the lease's TTL ends) are armed as after any read.
  g.reading = true;
  onRead(name, g.id, std::move(*seed));
  return g;
}

void ElectionObservers::add(const std::string& name, http::ResponderPtr stream,
                            StatusOr<lock::LockState> first_read) {
  Group& g = groupOf(name, &first_read);
  stream->startStream(200, "application/x-ndjson");
  if (g.known) stream->writeChunk(observeEvent(name, g.view));
  stream->onClientGone(alive_.guarded([this, name, id = g.id, raw = stream.get()] {
    remove(name, id, raw);
  }));
  g.streams.push_back(std::move(stream));
  ++streams_;
  metrics_.election_observers.Set(static_cast<double>(streams_));
}

void ElectionObservers::listen(const std::string& name,
                               std::function<void(const LeaderView&)> on_read) {
  Group& g = groupOf(name);
  g.listeners.push_back(std::move(on_read));
  // A group already known answers the newcomer with its next read, made now.
  if (g.known && !g.reading) read(g);
}

void ElectionObservers::read(Group& g) {
  g.reading = true;
  g.reread_timer.reset();
  service_.inspect(lock::LockId{lock::LockKind::kElection, g.name},
                   alive_.guarded([this, name = g.name, id = g.id](
                                      StatusOr<lock::LockState> state) {
                     onRead(name, id, std::move(state));
                   }));
}

void ElectionObservers::onRead(const std::string& name, uint64_t id,
                               StatusOr<lock::LockState> state) {
  Group* found = find(name, id);
  if (found == nullptr) return;
  Group& g = *found;
  g.reading = false;
  int64_t next_read_ms = reread_ms_;
  if (state.isOk()) {
    LeaderView next;
    next.held = state->held;
    if (next.held) {
      next.term = state->token;
      next.candidate = std::move(state->leader.candidate);
      next.value = std::move(state->leader.value);
      next.ttl_ms = state->ttl_ms;
      // Read again right after this lease would run out: a leader that dies announces nothing.
      next_read_ms = std::min(next_read_ms, next.ttl_ms + 1);
    }
    const bool stale = next.held && next.term < g.highest_term;
    if (!stale) {
      g.highest_term = std::max(g.highest_term, next.term);
      const bool changed = !g.known || !g.view.sameLeader(next);
      g.known = true;
      g.view = std::move(next);
      if (changed) broadcast(g);
      // Copied: a listener may add one (no group is erased while it has listeners).
      const auto listeners = g.listeners;
      for (const auto& on_read : listeners) on_read(g.view);
    }
  } else {
    // The backend is out: keep what is known and try again later (the lock service also
    // notifies watchers when the backend comes back).
    SL_LOG(kDebug, "election.observe_read_failed", {"name", name},
           {"error", state.status().message()});
  }
  if (g.read_again) {
    g.read_again = false;
    return read(g);
  }
  g.reread_timer.start(scheduler_, std::max<int64_t>(1, next_read_ms),
                       alive_.guarded([this, name, id] {
                         if (Group* again = find(name, id); again != nullptr && !again->reading) {
                           read(*again);
                         }
                       }));
}

void ElectionObservers::broadcast(Group& g) {
  const std::string line = observeEvent(g.name, g.view);
  for (const http::ResponderPtr& stream : g.streams) stream->writeChunk(line);
}

void ElectionObservers::remove(const std::string& name, uint64_t id,
                               const http::Responder* stream) {
  Group* g = find(name, id);
  if (g == nullptr) return;
  const size_t before = g->streams.size();
  std::erase_if(g->streams, [stream](const http::ResponderPtr& s) { return s.get() == stream; });
  streams_ -= before - g->streams.size();
  metrics_.election_observers.Set(static_cast<double>(streams_));
  // Its watch and timer go with it.
  if (g->streams.empty() && g->listeners.empty()) groups_.erase(name);
}

void ElectionObservers::endAll() {
  // Moved out first: ending a stream completes its response, after which onClientGone is not
  // called, but a callback of a stream already gone may still find its group.
  auto groups = std::move(groups_);
  groups_.clear();
  for (auto& [name, g] : groups) {
    for (const http::ResponderPtr& stream : g->streams) stream->endStream();
  }
  streams_ = 0;
  metrics_.election_observers.Set(0);
}

}  // namespace sidelock::api
