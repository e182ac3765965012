// The event streams of locks (GET /v1/locks/{name}/events): every stream of one name on this
// sidecar shares one view of the lock, one watch of its announcements and one backend read at a
// time (a WatchedNames group, like the observe streams of elections), so N watchers of a name
// cost one read per change plus their writes.
//
// How a change reaches a watcher: a grant, a hand-off, a release or a force release anywhere is
// announced on the name's release channel with what it was (LockService::watchChanges), which
// makes the group read the lock again and push what changed; an announced force release makes
// the end of that lease `forced` on every sidecar. A lease that runs out announces nothing: the
// group reads again right after the TTL it last saw ends (the lease's PTTL), and a read that
// finds the lease gone with no release announced since is `expired`. The periodic re-read every
// `reread_ms` catches a missed pub/sub message. Tokens order the events: a read showing a lower
// token than one already sent (a stale answer) is ignored, so a stream never goes backwards; only a
// lease read gone past its end is ended whatever the read's token (its data lost with Redis's).
//
// While the backend does not answer, what the stream last said goes stale: a lease seen held is
// past its end (its holder's sidecar may have renewed it, or not), a free lock may have been taken.
// Once reads have failed past that point (a held lease's end; a free lock's next re-read) the
// stream says `unknown` (once), and the next read that answers is followed by a `state` line,
// after any end or grant it shows, so that a watcher never acts on a state nobody vouches for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "api/watched_names.h"
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
  /// Ends every stream (the sidecar drains or stops).
  void endAll() { groups_.endAll(); }
  size_t count() const { return groups_.count(); }

 private:
  struct Watcher {
    http::ResponderPtr stream;
    bool with_extended = false;
    /// Came after the end of the lease the group shows, before a read told what became of it:
    /// its first line waits for that read (sendFirstLines), and nothing is sent to it before.
    bool awaiting_first = false;
  };
  struct View {
    bool held = false;
    uint64_t token = 0;
    int64_t ttl_ms = 0;
    int64_t deadline_ms = 0;  // held: when the lease runs out, on this sidecar's clock
    bool shared = false;
    int64_t readers = 0;
    std::string holder;    // held: the holder's public label ("" if none recorded)
    int64_t since_ms = 0;  // held: the grant's unix ms (0 if unknown)
  };
  /// How the last lease ended, as announced since the last read.
  enum class EndAnnounced { kNone, kReleased, kForced };
  struct State {
    View view;
    EndAnnounced end = EndAnnounced::kNone;
    bool regranted = false;  // a grant announced since the last read: readers' new hold too
    /// Announcements may have been missed since the last read: the backend or the name's
    /// subscription came back (ChangeReason::kCatchUp), or a read failed.
    bool missed = false;
  };
  using Groups = WatchedNames<State, Watcher>;

  /// One NDJSON line: {"event": type, "held", "holder", "mode", "name", "readers", "since_ms",
  /// "token", "ttl_ms"} (holder, mode, readers and since_ms only while held).
  static std::string eventLine(std::string_view name, std::string_view type, const View& view);
  static void noteAnnounced(State& s, lock::ChangeReason reason);
  /// After a read of `g`: the events it shows; the ms until the next read.
  int64_t onRead(Groups::Group& g, StatusOr<lock::LockState> state);
  /// onRead's work: the events a read shows.
  int64_t applyRead(Groups::Group& g, StatusOr<lock::LockState> state);
  /// After a read: the watchers awaiting their first line get it (`state`, or `unknown` once
  /// the group is), unless the read failed short of that.
  void sendFirstLines(Groups::Group& g);
  /// A newcomer's first line waits for the next read: the lease shown has reached its end.
  bool firstLineWaits(const Groups::Group& g) const;
  /// A newcomer's first line, counted: `state` of the view now (ttl_ms: what is left of a held
  /// lease), or `unknown` while the group is.
  void writeFirstLine(const Groups::Group& g, const Watcher& w);
  /// After a read of `g` that failed: `unknown` once what the streams said is past vouching for
  /// (WatchedNames::turnsUnknown); the ms until the next read.
  int64_t onReadFailed(Groups::Group& g, const Status& error);
  /// {"event":"unknown","name","token"}: the group's last token.
  static std::string unknownLine(const Groups::Group& g);
  /// Writes one event line to every watcher of `g` (`extended` only to those that asked).
  void send(Groups::Group& g, std::string_view type, const View& view);
  /// Writes `text`, a line of event `type`, as send() does, and counts it.
  void sendLine(Groups::Group& g, std::string_view type, const std::string& text);

  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  Groups groups_;
};

}  // namespace sidelock::api
