#include "api/lock_events.h"

#include <algorithm>
#include <utility>

#include "api/json_object.h"
#include "common/log.h"

namespace sidelock::api {

namespace {

/// A lease whose end (now + TTL, as read) moved later by more than this is `extended`: smaller
/// moves are the read's own round trip.
constexpr int64_t kExtendSlackMs = 50;

}  // namespace

LockEvents::LockEvents(lock::LockService& service, event::Scheduler& scheduler,
                       metrics::Metrics& metrics, int64_t reread_ms)
    : service_(service),
      scheduler_(scheduler),
      metrics_(metrics),
      reread_ms_(std::max<int64_t>(1, reread_ms)) {}

LockEvents::~LockEvents() = default;

LockEvents::Group* LockEvents::find(const std::string& name, uint64_t id) {
  auto it = groups_.find(name);
  if (it == groups_.end() || it->second->id != id) return nullptr;  // gone (or a newer group)
  return it->second.get();
}

LockEvents::Group& LockEvents::groupOf(const std::string& name) {
  auto [it, created] = groups_.try_emplace(name);
  if (!created) return *it->second;
  it->second = std::make_unique<Group>();
  Group& g = *it->second;
  g.id = ++next_group_id_;
  g.name = name;
  g.watch = service_.watchChanges(name, alive_.guarded([this, name, id = g.id] {
    Group* found = find(name, id);
    if (found == nullptr) return;
    found->announced = true;
    if (found->reading) {
      found->read_again = true;
      return;
    }
    read(*found);
  }));
  read(g);
  return g;
}

void LockEvents::add(const std::string& name, http::ResponderPtr stream, bool with_extended) {
  Group& g = groupOf(name);
  stream->startStream(200, "application/x-ndjson");
  Watcher w{std::move(stream), with_extended};
  if (g.known) {  // the newcomer's first line (the others had theirs)
    w.stream->writeChunk(eventLine(g.name, "state", g.view));
    metrics_.lock_events_sent_total.Add({{"type", "state"}}).Increment();
  }
  w.stream->onClientGone(alive_.guarded([this, name, id = g.id, raw = w.stream.get()] {
    remove(name, id, raw);
  }));
  g.watchers.push_back(std::move(w));
  ++streams_;
  metrics_.lock_event_streams.Set(static_cast<double>(streams_));
}

void LockEvents::noteForced(const std::string& name, uint64_t token) {
  auto it = groups_.find(name);
  if (it == groups_.end()) return;
  it->second->forced_token = token;
}

void LockEvents::read(Group& g) {
  g.reading = true;
  g.reread_timer.reset();
  // Asked as the readers' kind, like GET /v1/locks/{name}: it also tells readers from a writer.
  service_.inspect(lock::LockId{lock::LockKind::kShared, g.name},
                   alive_.guarded([this, name = g.name, id = g.id](
                                      StatusOr<lock::LockState> state) {
                     onRead(name, id, std::move(state));
                   }));
}

void LockEvents::onRead(const std::string& name, uint64_t id, StatusOr<lock::LockState> state) {
  Group* found = find(name, id);
  if (found == nullptr) return;
  Group& g = *found;
  g.reading = false;
  int64_t next_read_ms = reread_ms_;
  if (state.isOk()) {
    const int64_t now = scheduler_.nowMs();
    View next;
    next.held = state->held;
    next.token = state->token;
    if (next.held) {
      next.ttl_ms = state->ttl_ms;
      next.deadline_ms = now + state->ttl_ms;
      next.shared = state->used > 0;
      next.readers = state->used;
      // Read again right after this lease would run out: an expiry announces nothing.
      next_read_ms = std::min(next_read_ms, next.ttl_ms + 1);
    }
    if (!g.known) {
      g.known = true;
      g.view = next;
      send(g, "state", next);
    } else if (next.token >= g.view.token) {  // else a stale answer: never go backwards
      const View prev = g.view;
      const bool ended = prev.held && (!next.held || next.token != prev.token);
      if (ended) {
        std::string_view reason = "released";
        if (g.forced_token != 0 && g.forced_token == prev.token) {
          reason = "forced";
        } else if (!g.announced && now >= prev.deadline_ms) {
          reason = "expired";  // gone at its TTL with no release announced
        }
        View gone = prev;
        gone.held = false;
        gone.ttl_ms = 0;
        send(g, reason, gone);
      }
      if (!next.held && !prev.held && next.token > prev.token) {
        // A whole lease came and went between two reads (grants are not announced): its grant
        // and its end, in token order.
        send(g, "acquired", next);
        send(g, g.announced ? "released" : "expired", next);
      }
      if (next.held && (!prev.held || ended)) {
        send(g, "acquired", next);
      } else if (next.held && next.deadline_ms > prev.deadline_ms + kExtendSlackMs) {
        send(g, "extended", next);
      }
      // An unchanged lease keeps its first deadline, so that small moves do not add up.
      if (!(next.held && prev.held && !ended && next.deadline_ms <= prev.deadline_ms +
                                                                        kExtendSlackMs)) {
        g.view = next;
      }
    }
    g.announced = false;
  } else {
    // The backend is out: keep what is known and try again later.
    SL_LOG(kDebug, "lock.events_read_failed", {"name", name},
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

std::string LockEvents::eventLine(std::string_view name, std::string_view type,
                                  const View& view) {
  JsonObject line;
  line.text("event", type).boolean("held", view.held);
  if (view.held) line.text("mode", view.shared ? "shared" : "exclusive");
  line.text("name", name);
  if (view.held && view.shared) line.integer("readers", view.readers);
  return line.unsignedInteger("token", view.token)
      .integer("ttl_ms", view.held ? view.ttl_ms : 0)
      .finish();
}

void LockEvents::send(Group& g, std::string_view type, const View& view) {
  const std::string text = eventLine(g.name, type, view);
  const bool extended = type == "extended";
  double sent = 0;
  for (const Watcher& w : g.watchers) {
    if (extended && !w.with_extended) continue;
    w.stream->writeChunk(text);
    ++sent;
  }
  metrics_.lock_events_sent_total.Add({{"type", std::string(type)}}).Increment(sent);
}

void LockEvents::remove(const std::string& name, uint64_t id, const http::Responder* stream) {
  Group* g = find(name, id);
  if (g == nullptr) return;
  const size_t before = g->watchers.size();
  std::erase_if(g->watchers, [stream](const Watcher& w) { return w.stream.get() == stream; });
  streams_ -= before - g->watchers.size();
  metrics_.lock_event_streams.Set(static_cast<double>(streams_));
  if (g->watchers.empty()) groups_.erase(name);  // its watch and timer go with it
}

void LockEvents::endAll() {
  // Moved out first: a callback of a stream already gone may still look for its group.
  auto groups = std::move(groups_);
  groups_.clear();
  for (auto& [name, g] : groups) {
    for (const Watcher& w : g->watchers) w.stream->endStream();
  }
  streams_ = 0;
  metrics_.lock_event_streams.Set(0);
}

}  // namespace sidelock::api
