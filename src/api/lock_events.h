// The event streams of locks (GET /v1/locks/{name}/events): every stream of one name on this
// sidecar shares one view of the lock, one watch of its announcements and one backend read at a
// time, like the observe streams of elections (ElectionObservers), so N watchers of a name cost
// one read per change plus their writes.
//
// How a change reaches a watcher: a release or a force release anywhere is announced on the
// name's release channel (LockService::watchChanges), which makes the group read the lock again
// and push what changed. A lease that runs out announces nothing: the group reads again right
// after the TTL it last saw ends (the lease's PTTL), and a read that finds the lease gone with no
// announcement since is `expired`. A grant is not announced yet: it shows at the next read (an
// announcement, the PTTL read, or the periodic re-read every `reread_ms`, which also catches a
// missed pub/sub message). Tokens order the events: a read showing a lower token than one already
// sent (a stale answer) is ignored, so a stream never goes backwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "event/lifetime.h"
#include "event/scheduler.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

class LockEvents {
 public:
  LockEvents(lock::LockService& service, event::Scheduler& scheduler, metrics::Metrics& metrics,
             int64_t reread_ms);
  ~LockEvents();
  LockEvents(const LockEvents&) = delete;
  LockEvents& operator=(const LockEvents&) = delete;

  /// Starts `stream`'s NDJSON answer and adds it to `name`'s watchers: it gets the current state
  /// first (at once if known, else after the group's first read), then one event per change;
  /// `extended` events only if `with_extended`.
  void add(const std::string& name, http::ResponderPtr stream, bool with_extended);
  /// This sidecar force-released `name` (the operator's route) while its lease had `token`: the
  /// end of that lease is reported as `forced` rather than `released` by this sidecar's streams.
  void noteForced(const std::string& name, uint64_t token);
  /// Ends every stream (the sidecar drains or stops).
  void endAll();
  size_t count() const { return streams_; }

 private:
  struct Watcher {
    http::ResponderPtr stream;
    bool with_extended = false;
  };
  struct View {
    bool held = false;
    uint64_t token = 0;
    int64_t ttl_ms = 0;
    int64_t deadline_ms = 0;  // held: when the lease runs out, on this sidecar's clock
    bool shared = false;
    int64_t readers = 0;
  };
  struct Group {
    uint64_t id = 0;
    std::string name;
    std::vector<Watcher> watchers;
    lock::ChangeWatch watch;
    bool known = false;
    View view;
    bool announced = false;     // a release was announced since the last read
    uint64_t forced_token = 0;  // noteForced(): the lease force-released here
    bool reading = false;
    bool read_again = false;
    event::ScopedTimer reread_timer;
  };

  /// One NDJSON line: {"event": type, "held", "mode", "name", "readers", "token", "ttl_ms"}.
  static std::string eventLine(std::string_view name, std::string_view type, const View& view);
  Group& groupOf(const std::string& name);
  Group* find(const std::string& name, uint64_t id);
  void read(Group& g);
  void onRead(const std::string& name, uint64_t id, StatusOr<lock::LockState> state);
  /// Writes one event line to every watcher of `g` (`extended` only to those that asked).
  void send(Group& g, std::string_view type, const View& view);
  void remove(const std::string& name, uint64_t id, const http::Responder* stream);

  lock::LockService& service_;
  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  const int64_t reread_ms_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;
  uint64_t next_group_id_ = 0;
  size_t streams_ = 0;
  event::LivenessToken alive_;
};

}  // namespace sidelock::api
