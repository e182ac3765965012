// Answers remembered by request_id, so a client that retries an acquire or a release (its
// connection broke, its timeout fired) gets the first attempt's answer instead of a second
// action: the same grant rather than 409, the same release result rather than 404.
//
// Entries live `window_ms` and at most `max_entries` are kept (the oldest go first). Pure logic:
// the caller passes the time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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

  IdempotencyCache(int64_t window_ms, size_t max_entries)
      : window_us_(window_ms * 1000), max_entries_(max_entries) {}

  /// The answer stored under (route, name, request_id) within the window, or null.
  const Answer* find(std::string_view route, std::string_view name, std::string_view request_id,
                     int64_t now_us);
  /// Remembers `answer` (replacing an older one under the same key).
  void store(std::string_view route, std::string_view name, std::string_view request_id,
             Answer answer, int64_t now_us);
  /// Forgets the answer under this key (its expiry record goes when it comes due).
  void erase(std::string_view route, std::string_view name, std::string_view request_id) {
    entries_.erase(keyOf(route, name, request_id));
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Answer answer;
    int64_t expires_us = 0;
  };
  static std::string keyOf(std::string_view route, std::string_view name,
                           std::string_view request_id);
  void expire(int64_t now_us);

  int64_t window_us_;
  size_t max_entries_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::pair<int64_t, std::string>> order_;  // (expiry, key), oldest first
};

}  // namespace sidelock::api
