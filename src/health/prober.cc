#include "health/prober.h"

#include <llhttp.h>

#include <algorithm>
#include <map>
#include <utility>

#include "common/log.h"
#include "event/uv_handle.h"
#include "metrics/metrics.h"

namespace sidelock::health {
namespace {

/// One GET of one URL: connect, write, read up to the headers. Reports once through `done`,
/// which may destroy the attempt (nothing touches it afterwards). Its uv requests (connect,
/// write) may outlive it: their callbacks find the handle's data cleared (rule 3) and only free
/// themselves (src/README.md, rule 3).
class Attempt {
 public:
  Attempt(uv_loop_t* loop, event::Scheduler& scheduler, const ProbeUrl& url, int64_t timeout_ms,
          std::function<void(ProbeResult)> done)
      : done_(std::move(done)) {
    request_ = "GET " + url.target + " HTTP/1.1\r\nHost: " + url.host +
               "\r\nUser-Agent: sidelock-health\r\nAccept: */*\r\nConnection: close\r\n\r\n";
    llhttp_settings_init(&settings_);
    settings_.on_headers_complete = [](llhttp_t* p) {
      auto* self = static_cast<Attempt*>(p->data);
      self->status_ = p->status_code;
      return static_cast<int>(HPE_PAUSED);  // the status is all we need
    };
    llhttp_init(&parser_, HTTP_RESPONSE, &settings_);
    parser_.data = this;
    timeout_.start(scheduler, timeout_ms, [this] { finish(ProbeResult::kTimeout); });
    uv_tcp_t* tcp = tcp_.allocate(this);
    if (uv_tcp_init(loop, tcp) != 0) {
      tcp_.discardUninitialised();
      post(scheduler, ProbeResult::kRefused);
      return;
    }
    auto* connect = new uv_connect_t{};
    const int rc = uv_tcp_connect(connect, tcp, reinterpret_cast<const sockaddr*>(&url.address),
                                  [](uv_connect_t* req, int status) {
                                    auto* owner = static_cast<Attempt*>(req->handle->data);
                                    delete req;
                                    if (owner != nullptr) owner->onConnect(status);
                                  });
    if (rc != 0) {
      delete connect;
      post(scheduler, ProbeResult::kRefused);
    }
  }
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

 private:
  // A failure found at once still reaches the owner on a later turn (src/README.md, rule 4).
  void post(event::Scheduler& scheduler, ProbeResult result) {
    timeout_.start(scheduler, 0, [this, result] { finish(result); });
  }

  void onConnect(int status) {
    if (status != 0) return finish(ProbeResult::kRefused);
    auto* write = new uv_write_t{};
    uv_buf_t buf = uv_buf_init(request_.data(), static_cast<unsigned>(request_.size()));
    // request_ lives as long as the handle is open; once closed, the write is cancelled before
    // the handle's memory (and this object may be gone: the callback only frees the request).
    if (uv_write(write, reinterpret_cast<uv_stream_t*>(tcp_.get()), &buf, 1,
                 [](uv_write_t* req, int rc) {
                   auto* owner = static_cast<Attempt*>(req->handle->data);
                   delete req;
                   if (owner != nullptr && rc != 0) owner->finish(ProbeResult::kFailed);
                 }) != 0) {
      delete write;
      return finish(ProbeResult::kFailed);
    }
    // A socket that cannot be read from gives no answer: a failed probe (never one that waits
    // for its timeout, or for a read that never comes).
    const int read_rc = uv_read_start(
        reinterpret_cast<uv_stream_t*>(tcp_.get()),
        [](uv_handle_t* h, size_t, uv_buf_t* out) {
          auto* owner = static_cast<Attempt*>(h->data);
          *out = uv_buf_init(owner->buffer_, sizeof owner->buffer_);
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* read) {
          auto* owner = static_cast<Attempt*>(s->data);
          if (owner != nullptr) owner->onRead(n, read);
        });
    if (read_rc != 0) finish(ProbeResult::kFailed);
  }

  void onRead(ssize_t n, const uv_buf_t* buf) {
    if (n == 0) return;
    if (n < 0) {
      // EOF before the headers ended (or a reset): no answer.
      return finish(ProbeResult::kFailed);
    }
    read_bytes_ += static_cast<size_t>(n);
    if (read_bytes_ > kMaxAnswerBytes) return finish(ProbeResult::kFailed);
    const llhttp_errno_t err = llhttp_execute(&parser_, buf->base, static_cast<size_t>(n));
    if (err == HPE_PAUSED) {
      return finish(status_ >= 200 && status_ < 300 ? ProbeResult::kOk : ProbeResult::kFailed);
    }
    if (err != HPE_OK) finish(ProbeResult::kFailed);
  }

  void finish(ProbeResult result) {
    if (!done_) return;
    timeout_.reset();
    tcp_.close();
    auto done = std::move(done_);
    done_ = nullptr;
    done(result);  // may destroy this
  }

  std::function<void(ProbeResult)> done_;
  std::string request_;
  llhttp_t parser_{};
  llhttp_settings_t settings_{};
  int status_ = 0;
  size_t read_bytes_ = 0;
  char buffer_[4096];
  event::ScopedTimer timeout_;
  event::UvHandle<uv_tcp_t> tcp_;
};

}  // namespace

struct Prober::Impl {
  struct Watcher {
    int failures_needed = 1;
    int failures_seen = 0;
    int64_t counts_from_us = 0;  // failures before this (the watch's grace) are not counted
    bool told = false;
    std::function<void()> on_unhealthy;
    std::function<void()> on_healthy;  // set: the watch goes on after on_unhealthy
  };
  struct Probe {
    ProbeUrl url;
    int64_t interval_ms = 0;
    std::map<uint64_t, Watcher> watchers;
    std::unique_ptr<Attempt> attempt;
    event::ScopedTimer next;
  };

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  const HealthLimits limits_;
  std::map<std::string, std::unique_ptr<Probe>> probes_;
  uint64_t next_id_ = 1;
  event::LivenessToken alive_;

  Impl(uv_loop_t* l, event::Scheduler& s, metrics::Metrics& m, HealthLimits limits)
      : loop_(l), scheduler_(s), metrics_(m), limits_(std::move(limits)) {}

  void start(Probe& probe) {
    const std::string key = keyOf(probe);
    const int64_t timeout_ms = std::min(probe.interval_ms, kMaxTimeoutMs);
    probe.attempt = std::make_unique<Attempt>(
        loop_, scheduler_, probe.url, timeout_ms,
        alive_.guarded([this, key](ProbeResult result) { onResult(key, result); }));
  }

  static std::string keyOf(const Probe& probe) { return keyOf(probe.url, probe.interval_ms); }
  static std::string keyOf(const ProbeUrl& url, int64_t interval_ms) {
    return std::to_string(interval_ms) + " " + url.text;
  }

  // Calls the watcher's `pick` callback on a later turn, if the watch is still there then:
  // the callback may end the watch (and this probe), never under our feet.
  void tellLater(const std::string& key, uint64_t watch_id, std::function<void()> Watcher::*pick) {
    scheduler_.post(alive_.guarded([this, key, watch_id, pick] {
      auto found = probes_.find(key);
      if (found == probes_.end()) return;
      auto w = found->second->watchers.find(watch_id);
      if (w == found->second->watchers.end()) return;
      Watcher& watcher = w->second;
      // A one-shot watch gives its callback up; a lasting one keeps it for the next time.
      std::function<void()> fn = watcher.on_healthy ? watcher.*pick : std::move(watcher.*pick);
      if (fn) fn();
    }));
  }

  void onResult(const std::string& key, ProbeResult result) {
    auto it = probes_.find(key);
    if (it == probes_.end()) return;
    Probe& probe = *it->second;
    // The attempt is on the stack (its finish() called us): free it on a later turn.
    scheduler_.post([dead = std::shared_ptr<Attempt>(std::move(probe.attempt))] {});
    count(result);
    for (auto& [id, watcher] : probe.watchers) {
      if (result == ProbeResult::kOk) {
        watcher.failures_seen = 0;
        if (watcher.told && watcher.on_healthy) {
          watcher.told = false;
          SL_LOG(kInfo, "health.healthy_again", {"url", probe.url.text});
          tellLater(key, id, &Watcher::on_healthy);
        }
        continue;
      }
      if (watcher.told || scheduler_.nowUs() < watcher.counts_from_us) continue;
      if (++watcher.failures_seen < watcher.failures_needed) continue;
      watcher.told = true;
      SL_LOG(kWarn, "health.unhealthy", {"url", probe.url.text},
             {"failures", static_cast<long long>(watcher.failures_seen)});
      tellLater(key, id, &Watcher::on_unhealthy);
    }
    probe.next.start(scheduler_, probe.interval_ms, [this, key] {
      auto found = probes_.find(key);
      if (found != probes_.end()) start(*found->second);
    });
  }

  void count(ProbeResult result) {
    switch (result) {
      case ProbeResult::kOk:
        return metrics_.health_probe_ok.Increment();
      case ProbeResult::kFailed:
        return metrics_.health_probe_failed.Increment();
      case ProbeResult::kTimeout:
        return metrics_.health_probe_timeout.Increment();
      case ProbeResult::kRefused:
        return metrics_.health_probe_refused.Increment();
    }
  }
};

HealthWatch& HealthWatch::operator=(HealthWatch&& o) noexcept {
  if (this != &o) {
    reset();
    prober_ = std::exchange(o.prober_, nullptr);
    alive_ = std::move(o.alive_);
    key_ = std::move(o.key_);
    id_ = o.id_;
  }
  return *this;
}

void HealthWatch::reset() {
  Prober* prober = std::exchange(prober_, nullptr);
  if (prober != nullptr && !alive_.expired()) prober->unwatch(key_, id_);
}

Prober::Prober(uv_loop_t* loop, event::Scheduler& scheduler, metrics::Metrics& metrics,
               HealthLimits limits)
    : impl_(std::make_unique<Impl>(loop, scheduler, metrics, std::move(limits))) {}

Prober::~Prober() { impl_->metrics_.health_probes_active.Set(0); }

HealthWatch Prober::watch(const HealthSpec& spec, std::function<void()> on_unhealthy) {
  return watch(spec, std::move(on_unhealthy), nullptr);
}

HealthWatch Prober::watch(const HealthSpec& spec, std::function<void()> on_unhealthy,
                          std::function<void()> on_healthy) {
  auto probe = std::make_unique<Impl::Probe>();
  probe->url = spec.url;
  probe->interval_ms = spec.interval_ms;
  const std::string key = Impl::keyOf(*probe);
  auto [it, fresh] = impl_->probes_.try_emplace(key, std::move(probe));
  const uint64_t id = impl_->next_id_++;
  Impl::Watcher& watcher = it->second->watchers[id];
  watcher.failures_needed = std::max(1, spec.failures);
  watcher.counts_from_us = impl_->scheduler_.nowUs() + std::max<int64_t>(0, spec.grace_ms) * 1000;
  watcher.on_unhealthy = std::move(on_unhealthy);
  watcher.on_healthy = std::move(on_healthy);
  if (fresh) {
    impl_->metrics_.health_probes_active.Set(static_cast<double>(impl_->probes_.size()));
    impl_->start(*it->second);
  }
  return HealthWatch(this, alive_.ref(), key, id);
}

void Prober::unwatch(const std::string& key, uint64_t id) {
  auto it = impl_->probes_.find(key);
  if (it == impl_->probes_.end()) return;
  it->second->watchers.erase(id);
  if (!it->second->watchers.empty()) return;
  // The attempt may be the one reporting right now (a watcher's callback ending its watch runs
  // on a posted turn, never inside finish()), so destroying it here is safe.
  impl_->probes_.erase(it);
  impl_->metrics_.health_probes_active.Set(static_cast<double>(impl_->probes_.size()));
}

void Prober::shutdown() {
  impl_->probes_.clear();
  impl_->metrics_.health_probes_active.Set(0);
}

Status Prober::admit(const HealthSpec& spec, std::string_view field) const {
  if (std::string problem = healthPortProblem(spec.url, impl_->limits_, field); !problem.empty()) {
    return invalidArgument(std::move(problem));
  }
  if (impl_->probes_.count(Impl::keyOf(spec.url, spec.interval_ms)) == 0 &&
      impl_->probes_.size() >= impl_->limits_.max_probes) {
    return Status(StatusCode::kResourceExhausted,
                  "health.max_probes: " + std::to_string(impl_->limits_.max_probes) +
                      " distinct health probes (one per URL and interval) are running on this "
                      "sidecar; share a running probe's URL and interval_ms or try later");
  }
  return Status::ok();
}

const HealthLimits& Prober::limits() const { return impl_->limits_; }

size_t Prober::activeProbes() const { return impl_->probes_.size(); }

}  // namespace sidelock::health
