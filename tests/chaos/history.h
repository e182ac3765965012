// The chaos harness's log and the checkers that judge it. Every client operation and every
// injected fault is recorded with monotonic timestamps; the checkers read only this log (and the
// protected resource's own record), never the sidecar's internals.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sidelock::testing::chaos {

/// Microseconds on the steady clock since the harness started: every timestamp in the log.
int64_t nowUs();

enum class OpKind { kAcquire, kRelease, kRead, kWrite };
const char* opName(OpKind kind);

/// Outcome of an operation on the protected resource (kRead / kWrite).
constexpr int kResourceAccepted = 1;
constexpr int kResourceRejected = 0;
/// Status of a request that got no answer (connection refused, closed, or client timeout).
constexpr int kNoAnswer = -1;

struct Operation {
  int process = 0;  // which sidecar process the client talks to
  int client = 0;
  OpKind kind = OpKind::kAcquire;
  std::string lock;
  uint64_t token = 0;       // the grant's fencing token (0: none)
  int64_t validity_ms = 0;  // kAcquire: `ttl_ms` answered with the grant
  int64_t deadline_ms = 0;  // kAcquire: the wait budget asked for (`wait_ms`)
  int64_t invoke_us = 0;
  int64_t complete_us = 0;
  int status = 0;      // HTTP status, kNoAnswer, or kResourceAccepted / kResourceRejected
  bool fenced = true;  // false: the unfenced control, which skips token checks
};

/// An injected fault over [start_us, end_us]. `process` is the affected sidecar (-1: not one
/// sidecar, e.g. Redis); `loses_data` marks faults after which Redis may have forgotten leases.
struct Fault {
  std::string what;
  int process = -1;
  int64_t start_us = 0;
  int64_t end_us = 0;
  bool loses_data = false;
};

class History {
 public:
  void add(Operation op);
  /// Records a fault as it is (checker tests build their logs by hand).
  size_t addFault(Fault fault);
  /// Records a fault that starts now; endFault() closes it.
  size_t beginFault(std::string what, int process = -1, bool loses_data = false);
  void endFault(size_t index);

  std::vector<Operation> operations() const;
  std::vector<Fault> faults() const;

 private:
  mutable std::mutex mu_;
  std::vector<Operation> ops_;
  std::vector<Fault> faults_;
};

/// A grant and the time its holder may rely on it: [granted, min(release invoked, invoked +
/// validity)]. The end counts from the acquire's *invocation*: the lease may have started in
/// Redis as early as that, so a client that counted from the answer could outlive it.
struct GrantWindow {
  int process = 0;
  int client = 0;
  std::string lock;
  uint64_t token = 0;
  int64_t start_us = 0;
  int64_t end_us = 0;
};

/// Windows of every grant; grants already expired when their answer arrived (the sidecar
/// or the network was slow) are left out: a correct client discards them, and so does ours.
std::vector<GrantWindow> grantWindows(const History& history);

/// Grant windows of one lock must not overlap, except where a fault made Redis lose data (no
/// lease-based lock survives that: fencing is what protects the resource then).
std::vector<std::string> checkMutualExclusion(const History& history);
/// Fencing tokens strictly increase per lock, in grant order.
std::vector<std::string> checkTokenOrder(const History& history);
/// Every acquire ends by its wait budget plus `slack_ms` (derived from the configured timeouts),
/// except requests to a sidecar that a fault stopped or killed meanwhile.
std::vector<std::string> checkLiveness(const History& history, int64_t slack_ms);

/// Figures one scenario prints and the README reports.
struct Figures {
  size_t operations = 0;
  size_t grants = 0;
  size_t faults = 0;
  size_t violations = 0;
};

/// Prints "[chaos] <scenario>: ..." with the figures and every violation; returns the figures.
Figures report(const std::string& scenario, const History& history,
               const std::vector<std::string>& violations);

}  // namespace sidelock::testing::chaos
