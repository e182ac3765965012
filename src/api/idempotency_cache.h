// Answers remembered by request_id, so a client that retries an acquire or a release (its
// connection broke, its timeout fired) gets the first attempt's answer instead of a second
// action: the same grant rather than 409, the same release result rather than 404.
//
// A request id is claimed when its first request starts, not when it ends: a retry that arrives
// while the first is still running attaches to it and is answered with the first's answer (it
// never runs a second time). The first's caller finishes the claim, which hands back the attached
// retries and, if the answer is to be remembered, keeps it for `window_ms`.
//
// Memory is bounded twice: at most `max_entries` answers and at most `max_bytes` bytes (an
// estimate of what each entry really costs: its key twice, its answer, the map node and the
// expiry record). Past either bound the oldest answers go first; claims in flight are never
// dropped (they are bounded by the requests in flight). When the map has shrunk well below its
// peak its buckets are given back too. Pure logic: the caller passes the time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/http_types.h"

namespace sidelock::api {

class IdempotencyCache {
 public:
  struct Answer {
    int status = 200;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    // Acquire answers: the grant's owner id and token, so a retry can check the lease is still
    // that owner's before answering with it.
    std::string owner;
    uint64_t token = 0;
  };

  /// One claim, and the answer it leaves behind; never reused, so a late finish() or forget()
  /// cannot touch a newer claim of the same key.
  using Id = uint64_t;

  /// What begin() found under a key.
  struct Lookup {
    enum class Kind {
      kOff,       // replays are off (window or bounds 0): run the request without a claim
      kRun,       // claimed: run the request, then finish(key, id, ...)
      kReplay,    // answered within the window: `answer` (valid until the next call), `id`
      kAttached,  // in flight: the retry waits for the first's answer (finish() returns it)
      kMismatch,  // claimed or answered for another request (its fingerprint differs): refuse
    };
    Kind kind = Kind::kOff;
    const Answer* answer = nullptr;
    Id id = 0;
  };

  IdempotencyCache(int64_t window_ms, size_t max_entries, size_t max_bytes)
      : window_us_(window_ms * 1000), max_entries_(max_entries), max_bytes_(max_bytes) {}

  /// The key of (route, scope, request_id); every other call takes it.
  static std::string keyOf(std::string_view route, std::string_view scope,
                           std::string_view request_id);

  /// Claims `key` for a request that starts now, or finds its first request's answer, or (while
  /// that first request runs) attaches `retry` to it. `fingerprint` tells the request's fields
  /// (RequestBody::fingerprint): a retry must repeat them, or it is kMismatch (nothing changes).
  Lookup begin(const std::string& key, http::ResponderPtr retry, int64_t now_us,
               uint64_t fingerprint = 0);
  /// Ends claim `id`: returns the retries attached to it (to be answered as the first was) and
  /// remembers `remember` for the window when given; without it the key is free again.
  std::vector<http::ResponderPtr> finish(const std::string& key, Id id, const Answer* remember,
                                         int64_t now_us);
  /// Forgets the answer `id` left under `key` (the grant it names was given back or is gone).
  void forget(const std::string& key, Id id);
  /// Whether the answer `id` left under `key` was handed to a retry (begin() found it): a grant
  /// whose first answer went unread then has a reader after all and must not be given back.
  bool replayed(const std::string& key, Id id) const;

  /// Drops the answers whose window is over (the caller's timer calls it at nextExpiryUs()).
  void sweep(int64_t now_us);
  /// When the oldest remembered answer expires; 0 when none is remembered.
  int64_t nextExpiryUs() const;

  size_t size() const { return entries_.size(); }
  /// The estimated bytes held by remembered answers and claims (the `max_bytes` bound).
  size_t bytes() const { return bytes_; }
  size_t bucketCount() const { return entries_.bucket_count(); }

  /// Bucket and node overhead counted per entry on top of its strings (a libstdc++ hash node
  /// with a std::string key and this Entry, its bucket slot, and the expiry record).
  static constexpr size_t kEntryOverheadBytes = 256;

 private:
  struct Entry {
    Id id = 0;
    uint64_t fingerprint = 0;
    bool answered = false;
    bool replayed = false;  // begin() handed the answer to a retry
    Answer answer;
    int64_t expires_us = 0;
    size_t bytes = 0;
    std::vector<http::ResponderPtr> retries;  // attached while in flight
  };
  struct Expiry {
    int64_t expires_us;
    Id id;
    std::string key;
  };
  static size_t costOf(const std::string& key, const Answer& answer);
  void erase(std::unordered_map<std::string, Entry>::iterator it);
  /// Drops expired answers and, past a bound, the oldest ones; gives memory back after a large
  /// drop.
  void evict(int64_t now_us);
  bool off() const { return window_us_ <= 0 || max_entries_ == 0 || max_bytes_ == 0; }

  int64_t window_us_;
  size_t max_entries_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  Id next_id_ = 0;
  size_t peak_entries_ = 0;   // since the buckets were last sized
  size_t expired_bytes_ = 0;  // dropped by expiry since memory was last handed back
  std::unordered_map<std::string, Entry> entries_;
  std::deque<Expiry> order_;  // answered entries, oldest first
};

}  // namespace sidelock::api
