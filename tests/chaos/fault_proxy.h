// A small fault-injecting TCP proxy for the link between a sidecar and Redis (loopback only; tc
// netem is not available here). One thread forwards every connection both ways and, on demand,
// delays chunks, delays a share of them as a lost-and-retransmitted segment would be, swallows
// everything (blackhole), swallows only the replies (the command ran, its answer is lost), or
// resets every connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace sidelock::testing::chaos {

class FaultProxy {
 public:
  enum class Mode {
    kPass,
    kDelay,        // every chunk waits `delay_ms`
    kLossy,        // a share `loss` of chunks waits `delay_ms` (TCP retransmits what is lost)
    kBlackhole,    // nothing goes through either way; connections stay open
    kDropReplies,  // requests reach Redis, replies never come back
  };

  /// Listens on a free loopback port and forwards to 127.0.0.1:target_port.
  explicit FaultProxy(int target_port);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  void setMode(Mode mode, int64_t delay_ms = 0, double loss = 0);
  /// Closes every open connection with a TCP reset (new ones are still accepted).
  void resetAll() { reset_requested_ = true; }

 private:
  struct Settings {
    Mode mode = Mode::kPass;
    int64_t delay_ms = 0;
    double loss = 0;
  };
  void run();
  Settings settings() const;

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  mutable std::mutex mu_;
  Settings settings_;
  std::atomic<bool> reset_requested_{false};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace sidelock::testing::chaos
