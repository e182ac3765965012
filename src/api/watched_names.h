// The per-name "watch + read + re-read" groups behind the streams that follow a lock or an
// election (LockEvents, ElectionObservers): every stream of one name on this sidecar shares one
// group, which holds one watch of the name's announcements (LockService::watchChanges), one
// backend read at a time and one re-read timer, so N streams of a name cost one read per change
// plus their writes.
//
// A group reads the name when it is made (or starts from a read its caller just made: `seed`),
// again on each announcement (one read at a time: an announcement during a read asks for one more
// after it), and again `reread_ms` after its last read, or sooner when the owner's read handler
// asks (the lease's TTL ends: expiries are not announced). The re-read also catches an
// announcement missed by a dropped pub/sub link. The owner keeps what it knows of the name in
// the group's `State` and writes its streams from the handlers; a group ends with its last
// stream (unless pinned), taking its watch and timer with it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "event/lifetime.h"
#include "event/scheduler.h"
#include "http/http_types.h"
#include "lock/lock_service.h"

namespace sidelock::api {

/// `Watcher`: what the owner keeps per stream; it has a `http::ResponderPtr stream` member.
template <typename State, typename Watcher>
class WatchedNames {
 public:
  struct Group {
    uint64_t id = 0;
    std::string name;
    std::vector<Watcher> watchers;
    bool pinned = false;  // kept without watchers (ElectionObservers::listen)
    bool known = false;   // a read has answered
    State state;
    lock::ChangeWatch watch;
    bool reading = false;
    bool read_again = false;  // a change was announced while a read was in flight
    event::ScopedTimer reread_timer;
    int64_t last_answer_ms = 0;  // when a read last answered (the scheduler's clock)
    /// The streams were told `unknown` (turnsUnknown); the owner clears it when it sends the
    /// state a read shows again.
    bool unknown = false;
  };
  /// After each read of `g`: `state` is the answer (or the backend's error). Returns how soon
  /// (ms) to read again; the group reads again no later than reread_ms anyway.
  using ReadHandler = std::function<int64_t(Group& g, StatusOr<lock::LockState> state)>;
  /// An announcement for `g`'s name, before the read it causes.
  using ChangeHandler = std::function<void(Group& g, lock::ChangeReason reason)>;
  /// The number of open streams changed (a gauge).
  using CountHandler = std::function<void(size_t streams)>;

  WatchedNames(lock::LockService& service, event::Scheduler& scheduler, lock::LockKind kind,
               int64_t reread_ms, ReadHandler on_read, ChangeHandler on_change,
               CountHandler on_count)
      : service_(service),
        scheduler_(scheduler),
        kind_(kind),
        reread_ms_(std::max<int64_t>(1, reread_ms)),
        on_read_(std::move(on_read)),
        on_change_(std::move(on_change)),
        on_count_(std::move(on_count)) {}
  WatchedNames(const WatchedNames&) = delete;
  WatchedNames& operator=(const WatchedNames&) = delete;

  int64_t rereadMs() const { return reread_ms_; }
  size_t count() const { return streams_; }

  /// `name`'s group, made (watching, and reading unless `seed` answered) if new. A seed is a read
  /// the caller just made: it stands for the group's first read (one backend read per new
  /// stream); a group that exists keeps its own state.
  Group& groupOf(const std::string& name, StatusOr<lock::LockState>* seed = nullptr) {
    auto [it, created] = groups_.try_emplace(name);
    if (!created) return *it->second;
    it->second = std::make_unique<Group>();
    Group& g = *it->second;
    g.id = ++next_group_id_;
    g.name = name;
    g.watch = service_.watchChanges(
        name, alive_.guarded([this, name, id = g.id](lock::ChangeReason reason) {
          Group* found = find(name, id);
          if (found == nullptr) return;
          if (on_change_) on_change_(*found, reason);
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
    // Taken as if it had just answered, so the re-reads that catch up on a change announced
    // before the watch was in place are armed as after any read.
    g.reading = true;
    onRead(name, g.id, std::move(*seed));
    return g;
  }

  /// Starts `w.stream`'s NDJSON answer and adds it to `g`; it leaves when its client goes. A
  /// stream whose client is gone once it started (a HEAD request, answered with the head alone)
  /// is not added: nullptr, and `g` ends too unless something else keeps it.
  Watcher* addWatcher(Group& g, Watcher w) {
    w.stream->startStream(200, "application/x-ndjson");
    if (!w.stream->clientConnected()) {
      if (g.watchers.empty() && !g.pinned) {
        const std::string name = g.name;
        groups_.erase(name);
      }
      return nullptr;
    }
    w.stream->onClientGone(alive_.guarded(
        [this, name = g.name, id = g.id, raw = w.stream.get()] { remove(name, id, raw); }));
    g.watchers.push_back(std::move(w));
    ++streams_;
    if (on_count_) on_count_(streams_);
    return &g.watchers.back();
  }

  /// After a read of `g` that failed: true, once, when what its streams last said is past
  /// vouching for, and `g` turns unknown: a lease seen held after `held_until_ms` (its end), a
  /// free name after the re-read that follows the last read that answered (it may have been taken
  /// meanwhile). `next_read_ms` is how soon to read again: at that point, if before the re-read.
  bool turnsUnknown(Group& g, bool held, int64_t held_until_ms, int64_t& next_read_ms) {
    next_read_ms = reread_ms_;
    if (!g.known || g.unknown) return false;
    const int64_t vouched_until_ms = held ? held_until_ms : g.last_answer_ms + reread_ms_;
    const int64_t now = scheduler_.nowMs();
    if (now < vouched_until_ms) {
      next_read_ms = std::min(reread_ms_, vouched_until_ms - now + 1);
      return false;
    }
    g.unknown = true;
    return true;
  }

  /// Reads `g` now unless a read is in flight.
  void readNow(Group& g) {
    if (!g.reading) read(g);
  }

  /// Ends every stream (the sidecar drains) and forgets every group.
  void endAll() {
    // Moved out first: ending a stream completes its response, after which onClientGone is not
    // called, but a callback of a stream already gone may still look for its group.
    auto groups = std::move(groups_);
    groups_.clear();
    for (auto& [name, g] : groups) {
      for (const Watcher& w : g->watchers) w.stream->endStream();
    }
    streams_ = 0;
    if (on_count_) on_count_(0);
  }

 private:
  Group* find(const std::string& name, uint64_t id) {
    auto it = groups_.find(name);
    if (it == groups_.end() || it->second->id != id) return nullptr;  // gone (or a newer group)
    return it->second.get();
  }

  void read(Group& g) {
    g.reading = true;
    g.reread_timer.reset();
    service_.inspect(
        lock::LockId{kind_, g.name},
        alive_.guarded([this, name = g.name, id = g.id](StatusOr<lock::LockState> state) {
          onRead(name, id, std::move(state));
        }));
  }

  void onRead(const std::string& name, uint64_t id, StatusOr<lock::LockState> state) {
    Group* found = find(name, id);
    if (found == nullptr) return;
    Group& g = *found;
    g.reading = false;
    if (state.isOk()) g.last_answer_ms = scheduler_.nowMs();
    const int64_t next_read_ms = std::min(reread_ms_, on_read_(g, std::move(state)));
    if (g.read_again) {
      g.read_again = false;
      return read(g);
    }
    g.reread_timer.start(scheduler_, std::max<int64_t>(1, next_read_ms),
                         alive_.guarded([this, name, id] {
                           if (Group* again = find(name, id); again != nullptr) readNow(*again);
                         }));
  }

  void remove(const std::string& name, uint64_t id, const http::Responder* stream) {
    Group* g = find(name, id);
    if (g == nullptr) return;
    const size_t before = g->watchers.size();
    std::erase_if(g->watchers, [stream](const Watcher& w) { return w.stream.get() == stream; });
    streams_ -= before - g->watchers.size();
    if (on_count_) on_count_(streams_);
    if (g->watchers.empty() && !g->pinned) groups_.erase(name);  // its watch and timer go too
  }

  lock::LockService& service_;
  event::Scheduler& scheduler_;
  const lock::LockKind kind_;
  const int64_t reread_ms_;
  ReadHandler on_read_;
  ChangeHandler on_change_;
  CountHandler on_count_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;
  uint64_t next_group_id_ = 0;
  size_t streams_ = 0;
  event::LivenessToken alive_;
};

}  // namespace sidelock::api
