// The observe streams of elections (GET /v1/elections/{name}/observe): every stream of one name
// on this sidecar shares one view of its leader, one watch of its announcements and one backend
// read at a time (a WatchedNames group), so 10,000 observers of a name cost what one does, plus
// their writes.
//
// How a change reaches an observer: a grant, proclaim or resign anywhere is announced on the
// name's release channel (LockService::watchChanges), which makes the group read the leader again
// and push what changed. Nothing announces a lease that just runs out (a leader that died), and a
// pub/sub message can be missed (a dropped subscription link): the group therefore also reads
// again every `reread_ms` and right after the leader's TTL ends, so a missed change shows within
// reread_ms, and a dead leader's end within its TTL plus one read.
//
// While the backend does not answer, the leader last shown is vouched for until its lease's end
// (a free election: until the next re-read); reads that keep failing past it make the streams say
// `unknown` (once), and the next read that answers sends the state it read, changed or not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/watched_names.h"
#include "event/scheduler.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

/// What the observers of one election know of its leader.
struct LeaderView {
  bool held = false;
  uint64_t term = 0;  // held: the leader's term
  std::string candidate;
  std::string value;
  int64_t ttl_ms = 0;  // held: the lease's TTL left when read
  int64_t deadline_ms = 0;  // held: when that lease runs out, on this sidecar's clock

  bool sameLeader(const LeaderView& o) const {
    return held == o.held &&
           (!held || (term == o.term && candidate == o.candidate && value == o.value));
  }
};

/// The NDJSON line an observer gets for `view` of election `name`: {"event":"leader",...} or
/// {"event":"no_leader",...}.
std::string observeEvent(std::string_view name, const LeaderView& view);

class ElectionObservers {
 public:
  ElectionObservers(lock::LockService& service, event::Scheduler& scheduler,
                    metrics::Metrics& metrics, int64_t reread_ms);
  ~ElectionObservers();
  ElectionObservers(const ElectionObservers&) = delete;
  ElectionObservers& operator=(const ElectionObservers&) = delete;

  /// Starts `stream`'s NDJSON answer and adds it to `name`'s observers: it gets the current state
  /// first (at once if known, else after the group's first read), then one event per change.
  /// `first_read` is a read of the leader the caller just made: a new group starts from it
  /// rather than reading again (one backend read per new observe stream); a group that exists
  /// keeps its own view (its terms never go back).
  void add(const std::string& name, http::ResponderPtr stream,
           StatusOr<lock::LockState> first_read);
  /// Calls `on_read` with the leader of `name` after each of the group's reads that answered (a
  /// change announced, a re-read: at least every `reread_ms` while the backend answers), for as
  /// long as this object lives or until endAll(); never inside this call. For the elections the
  /// sidecar runs itself (PodElections), which share the group of the name's observe streams.
  void listen(const std::string& name, std::function<void(const LeaderView&)> on_read);
  /// Ends every stream (the sidecar drains) and forgets every group (and listener).
  void endAll() { groups_.endAll(); }
  size_t count() const { return groups_.count(); }

 private:
  struct Observer {
    http::ResponderPtr stream;
  };
  struct State {
    LeaderView view;
    /// The highest term any read showed: a read showing a lower one (an older leader, seen
    /// through a stale answer) is ignored, so terms in a stream never go backwards.
    uint64_t highest_term = 0;
    std::vector<std::function<void(const LeaderView&)>> listeners;
  };
  using Groups = WatchedNames<State, Observer>;

  /// After a read of `g`: pushes a new leader to its streams; the ms until the next read.
  int64_t onRead(Groups::Group& g, StatusOr<lock::LockState> state);
  /// After a read of `g` that failed: `unknown` once the leader shown is past vouching for
  /// (WatchedNames::turnsUnknown); the ms until the next read.
  int64_t onReadFailed(Groups::Group& g, const Status& error);
  /// {"event":"unknown","name","term"}: the highest term shown (left out if none).
  static std::string unknownLine(const Groups::Group& g);

  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  Groups groups_;
};

}  // namespace sidelock::api
