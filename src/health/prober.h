// Probes apps' health endpoints for health-bound holds (README "Holds that follow the app's
// health"). Knows nothing of locks: a holder watches a URL and is told once when it failed
// `failures` times in a row. One probe per (URL, interval) is shared by every watch naming it
// (refcounted; it stops with the last watch). Probes never block the loop: an async libuv TCP
// connect, one HTTP/1.1 GET (Connection: close) whose answer is read by llhttp up to its status
// line and headers (at most kMaxAnswerBytes), a timeout of min(interval, kMaxTimeoutMs), and no
// redirect followed (a 3xx is a failure).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "event/lifetime.h"
#include "event/scheduler.h"
#include "health/probe_url.h"

namespace sidelock::metrics {
class Metrics;
}

namespace sidelock::health {

/// What one probe found.
enum class ProbeResult { kOk, kFailed, kTimeout, kRefused };

/// How a hold is bound to its app's health: the validated request field.
struct HealthSpec {
  ProbeUrl url;
  int64_t interval_ms = 1000;
  int failures = 3;
  /// Failed probes in the first grace_ms of a watch do not count (an app still starting up, as a
  /// Kubernetes startupProbe allows); the probes run and are counted in the metrics all the same.
  int64_t grace_ms = 0;
};

inline constexpr int64_t kMinIntervalMs = 100;
inline constexpr int64_t kMaxIntervalMs = 60000;
inline constexpr int kMaxFailures = 100;
inline constexpr int64_t kMaxGraceMs = 600000;
inline constexpr int64_t kMaxTimeoutMs = 2000;
inline constexpr size_t kMaxAnswerBytes = 16 * 1024;

class Prober;

/// Keeps a watch alive; destroying it (or reset()) stops it, and the shared probe with the last
/// watch. Harmless after the prober is gone.
class HealthWatch {
 public:
  HealthWatch() = default;
  HealthWatch(HealthWatch&& o) noexcept { *this = std::move(o); }
  HealthWatch& operator=(HealthWatch&& o) noexcept;
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;
  ~HealthWatch() { reset(); }
  void reset();
  explicit operator bool() const { return prober_ != nullptr; }

 private:
  friend class Prober;
  HealthWatch(Prober* prober, event::LivenessToken::Ref alive, std::string key, uint64_t id)
      : prober_(prober), alive_(std::move(alive)), key_(std::move(key)), id_(id) {}
  Prober* prober_ = nullptr;
  event::LivenessToken::Ref alive_;
  std::string key_;
  uint64_t id_ = 0;
};

class Prober {
 public:
  Prober(uv_loop_t* loop, event::Scheduler& scheduler, metrics::Metrics& metrics);
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  /// Probes `spec.url` every `spec.interval_ms` (the first probe at once, unless the shared
  /// probe is already running) and calls `on_unhealthy` once, on a later loop turn, after
  /// `spec.failures` failed probes in a row counted from this watch's start. Never called after
  /// the watch is destroyed.
  HealthWatch watch(const HealthSpec& spec, std::function<void()> on_unhealthy);

  /// Stops every probe at once (closing its socket and timers); watches stay valid and are never
  /// called. At the sidecar's shutdown: a probe to an app that accepted but never answers would
  /// otherwise keep the loop alive.
  void shutdown();

  /// Distinct probes running now (for tests; also the sidelock_health_probes gauge).
  size_t activeProbes() const;

 private:
  friend class HealthWatch;
  struct Impl;
  void unwatch(const std::string& key, uint64_t id);
  std::unique_ptr<Impl> impl_;
  event::LivenessToken alive_;
};

}  // namespace sidelock::health
