// The one mutual-exclusion observer of the test suite: clients record the time from each grant's
// answer to their release request (what they relied on), and checkExclusion() judges the log.
// It never reads the sidecar's own counters: a sidecar that lied to its metrics would pass those.
// Used by the semaphore, read/write, fair, multi-lock and chaos tests.
//
//   HoldLog log;                 // shared by the client threads
//   auto from = HoldLog::now();  // after the 200 of the acquire
//   ... work ...
//   log.record("ledger", from, HoldLog::now(), HoldMode::kShared);  // before the release
//   ExclusionReport report = checkExclusion(log.holds(), {.shared_limit = 3, .excused = nullptr});
//   EXPECT_TRUE(report.violations.empty()) << report.violations.front();
#pragma once

#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace sidelock::testing {

enum class HoldMode {
  kExclusive,  // a mutex holder, a writer, one lock of a multi-lock
  kShared,     // a reader, a semaphore permit: side by side up to ExclusionRules::shared_limit
};

/// One client's hold of one lock, in microseconds of the steady clock (any common origin).
struct Hold {
  std::string lock;
  int64_t from_us = 0;
  int64_t to_us = 0;
  HoldMode mode = HoldMode::kExclusive;
  std::string who;    // for the violation's text ("client 3 token 17")
  uint64_t tag = 0;   // the caller's own reference back to what it recorded
};

struct ExclusionRules {
  /// Most shared holds of one lock at once (a semaphore's limit; readers: no limit).
  int shared_limit = INT_MAX;
  /// A conflict to pass over (chaos: Redis lost its data between the two grants, which no
  /// lease-based lock survives). Null: none is excused.
  std::function<bool(const Hold&, const Hold&)> excused;
};

struct ExclusionReport {
  /// "lock L held by A and B" (or "... by N shared holders, over the limit of K"), in time order.
  std::vector<std::string> violations;
  /// Most holds of one lock open at one instant (2+ shows the test produced overlap at all).
  int most_at_once = 0;
  /// Pairs of shared holds of one lock that overlapped (readers really shared).
  int shared_overlaps = 0;
};

/// Judges `holds` per lock: at every instant a lock has one exclusive holder and nobody else, or
/// up to `rules.shared_limit` shared holders. A hold ending exactly when another starts does not
/// overlap it.
ExclusionReport checkExclusion(std::vector<Hold> holds, const ExclusionRules& rules = {});

/// Thread-safe log of the holds client threads observed.
class HoldLog {
 public:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() { return Clock::now(); }

  void record(std::string lock, Clock::time_point from, Clock::time_point to,
              HoldMode mode = HoldMode::kExclusive, std::string who = {});
  std::vector<Hold> holds() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<Hold> holds_;
};

}  // namespace sidelock::testing
