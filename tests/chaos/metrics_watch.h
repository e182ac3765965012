// Scrapes /metrics of every sidecar while a scenario runs: counters must never decrease within one
// process lifetime, and the held/waiting gauges must come back to 0 once the workload stopped.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sidelock::testing::chaos {

/// Samples of one /metrics answer: "name{labels}" -> value. Throws if the sidecar did not answer
/// within timeout_ms.
std::map<std::string, double> scrapeMetrics(int port, int timeout_ms = 1000);

class MetricsWatch {
 public:
  explicit MetricsWatch(std::vector<int> ports, int interval_ms = 100);
  ~MetricsWatch();
  MetricsWatch(const MetricsWatch&) = delete;
  MetricsWatch& operator=(const MetricsWatch&) = delete;

  /// Sidecar `process` is about to restart: its counters legitimately start again from zero.
  void forget(int process);
  /// Stops scraping and returns every counter decrease seen.
  std::vector<std::string> finish();
  size_t scrapes() const { return scrapes_.load(); }

 private:
  void run();
  std::vector<int> ports_;
  int interval_ms_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> scrapes_{0};
  std::mutex mu_;
  std::vector<uint64_t> generation_;                 // bumped by forget()
  std::vector<std::map<std::string, double>> last_;  // last counters per process
  std::vector<std::string> violations_;
  std::thread thread_;
};

/// Polls until sidelock_held_locks and sidelock_waiters are 0; a violation if not by timeout_ms.
std::vector<std::string> checkGaugesReturnToZero(int port, int process, int64_t timeout_ms);

}  // namespace sidelock::testing::chaos
