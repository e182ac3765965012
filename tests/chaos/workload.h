// The chaos workload: client threads, spread over several sidecar processes, loop
// acquire -> read the register -> check the validity left -> write the register -> release, and
// log every step in a History. One client at a time can be told to pause inside its critical
// section (a GC pause, a stopped VM) until its lease expired and someone else wrote.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chaos/history.h"

namespace sidelock::testing::chaos {

struct WorkloadOptions {
  std::vector<int> sidecar_ports;  // client i talks to sidecar i % size (its `process`)
  int clients = 4;
  /// Client i uses lock (i / sidecars) % size: every lock has clients on every sidecar.
  std::vector<std::string> locks = {"chaos"};
  int resource_port = 0;
  /// Register key per lock: prefix + lock name.
  std::string register_prefix = "register:";
  int64_t ttl_ms = 800;
  int64_t wait_ms = 3000;
  /// A client does not start a write with less than this much validity left.
  int64_t write_margin_ms = 100;
  bool fenced = true;
  /// HTTP client timeout beyond the wait budget: a request without an answer by then is logged
  /// as kNoAnswer (a stopped sidecar) and the client reconnects.
  int64_t answer_slack_ms = 3000;
  /// > 0: every grant is an `auto_renew` lease held this long (the sidecar's watchdog renews
  /// it), the register written about every 100 ms meanwhile, until the hold ends or the register
  /// refuses the token (a later holder exists: the lease was lost).
  int64_t auto_renew_hold_ms = 0;
};

/// How the long auto_renew holds ended (WorkloadOptions::auto_renew_hold_ms).
struct HoldOutcomes {
  int64_t held_through = 0;      // release answered 200: the lease was ours throughout
  int64_t loss_reported = 0;     // release answered 404 lease_lost / not_held or 409 not_owner
  int64_t unanswered = 0;        // no answer to the release
  int64_t refused_accesses = 0;  // register accesses refused by token (stale holder caught)
  /// Holds whose release said 200 although the register had refused their token: the lease was
  /// lost and re-taken without telling the client (never allowed).
  std::vector<std::string> silent_losses;
};

/// What the paused client saw when it woke up and wrote anyway.
struct PausedWrite {
  std::string lock;
  uint64_t token = 0;
  bool accepted = false;
};

class Workload {
 public:
  Workload(History& history, WorkloadOptions options);
  ~Workload();  // stops and joins
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  /// Stops every client after its current operation and joins the threads.
  void stop();
  /// Successful grants so far.
  int64_t grants() const { return grants_.load(); }
  /// Polls until `n` more grants happened (false on timeout).
  bool waitForMoreGrants(int64_t n, int64_t timeout_ms) const;

  /// The next client to pass its validity check in a critical section stops there until its
  /// lease window ended and another holder wrote the register, then writes without checking
  /// again. Waits for that write and returns it (nullopt if nothing happened by timeout_ms).
  std::optional<PausedWrite> pauseOneClientInCriticalSection(int64_t timeout_ms);

  HoldOutcomes holdOutcomes() const;

 private:
  void runClient(int index);
  /// Holds the calling client (which took the pause request) until its window ended and another
  /// holder wrote the register.
  void pauseUntilOvertaken(const std::string& register_key, int64_t window_end_us,
                           int64_t accepted_at_read, int process, int client);

  History& history_;
  WorkloadOptions options_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> grants_{0};
  std::atomic<bool> pause_requested_{false};
  std::mutex pause_mu_;
  std::condition_variable pause_done_;
  std::optional<PausedWrite> paused_write_;
  mutable std::mutex outcomes_mu_;
  HoldOutcomes outcomes_;
  std::vector<std::thread> threads_;
};

/// Builds the JSON body of an acquire.
std::string acquireBody(int64_t ttl_ms, int64_t wait_ms);

}  // namespace sidelock::testing::chaos
