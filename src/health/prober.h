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
#include <string_view>

#include "event/lifetime.h"
#include "event/scheduler.h"
#include "health/probe_url.h"

namespace sidelock::metrics {
class Metrics;
}

namespace sidelock::health {

/// What one probe found.
enum class ProbeResult { kOk, kFailed, kTimeout, kRefused };

/// How a hold is bound to its app's health (common/health_spec.h).
using HealthSpec = sidelock::HealthSpec;

inline constexpr int64_t kMinIntervalMs = kMinHealthIntervalMs;
inline constexpr int64_t kMaxIntervalMs = kMaxHealthIntervalMs;
inline constexpr int kMaxFailures = kMaxHealthFailures;
inline constexpr int64_t kMaxGraceMs = kMaxHealthGraceMs;
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
  Prober(uv_loop_t* loop, event::Scheduler& scheduler, metrics::Metrics& metrics,
         HealthLimits limits = {});
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  /// Probes `spec.url` every `spec.interval_ms` (the first probe at once, unless the shared
  /// probe is already running) and calls `on_unhealthy` once, on a later loop turn, after
  /// `spec.failures` failed probes in a row counted from this watch's start. Never called after
  /// the watch is destroyed.
  /// Not checked against the limits: call admit() first.
  HealthWatch watch(const HealthSpec& spec, std::function<void()> on_unhealthy);
  /// The same, but the watch goes on after `on_unhealthy`: the first probe that succeeds after it
  /// calls `on_healthy` (on a later loop turn), and failures in a row are counted afresh from
  /// there (a candidate that leaves its elections while its app is sick and comes back).
  HealthWatch watch(const HealthSpec& spec, std::function<void()> on_unhealthy,
                    std::function<void()> on_healthy);

  /// Whether a hold naming `spec` may watch now (README "Holds that follow the app's health",
  /// config `health`): kInvalidArgument when its port is not in `allowed_ports`;
  /// kResourceExhausted when it would start a probe beyond `max_probes` distinct ones (a watch
  /// that shares a running probe is always admitted). `field` names the URL in the message.
  Status admit(const HealthSpec& spec, std::string_view field = "health.url") const;
  const HealthLimits& limits() const;

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
