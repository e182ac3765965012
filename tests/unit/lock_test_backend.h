// A Backend for lock-service unit tests: a MemoryBackend underneath, plus call counting, injected
// errors and delayed replies (pure logic, no sockets).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/memory_backend.h"
#include "event/fake_scheduler.h"

namespace sidelock::lock::testing {

class TestBackend final : public backend::Backend {
 public:
  explicit TestBackend(event::FakeScheduler& s) : sched_(s), mem_(s) {}

  backend::MemoryBackend& memory() { return mem_; }

  // What the service sent, with the (fake) time it was sent at.
  struct Call {
    std::string op;
    std::string name;
    int64_t at_us;
  };
  std::vector<Call> calls;
  int count(const std::string& op) const {
    int n = 0;
    for (const auto& c : calls) n += c.op == op;
    return n;
  }

  // Faults: when set, the call fails with this status (posted) and the memory is not touched.
  std::optional<Status> fail_acquire;
  std::optional<Status> fail_extend;
  std::optional<Status> fail_release;
  int64_t extend_reply_delay_ms = 0;   // the extend is applied at once, its answer comes later
  int64_t release_reply_delay_ms = 0;  // hand-offs only: applied at once, answered later

  void start() override {}
  void acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
               backend::AcquireCallback cb) override {
    record("acquire", name);
    if (fail_acquire) return fail(std::move(cb), *fail_acquire);
    mem_.acquire(name, owner, ttl_ms, std::move(cb));
  }
  void release(std::string_view name, std::string_view owner,
               backend::OwnerCheckCallback cb) override {
    record("release", name);
    if (fail_release) return fail(std::move(cb), *fail_release);
    mem_.release(name, owner, std::move(cb));
  }
  // Hand-off is off unless a test turns it on, so the other tests see plain release + acquire.
  bool hand_off = false;
  bool canHandOff() const override { return hand_off; }
  void releaseAndGrant(std::string_view name, std::string_view owner, std::string_view next_owner,
                       int64_t next_ttl_ms, backend::HandOffCallback cb) override {
    record("release_grant", name);
    if (fail_release) return fail(std::move(cb), *fail_release);
    if (release_reply_delay_ms == 0) {
      return mem_.releaseAndGrant(name, owner, next_owner, next_ttl_ms, std::move(cb));
    }
    mem_.releaseAndGrant(
        name, owner, next_owner, next_ttl_ms,
        [this, cb = std::move(cb)](StatusOr<backend::HandOffReply> r) mutable {
          sched_.runAfter(release_reply_delay_ms,
                          [cb = std::move(cb), r = std::move(r)]() mutable { cb(std::move(r)); });
        });
  }
  void extend(std::string_view name, std::string_view owner, int64_t ttl_ms,
              backend::ExtendCallback cb) override {
    record("extend", name);
    if (fail_extend) return fail(std::move(cb), *fail_extend);
    if (extend_reply_delay_ms == 0) return mem_.extend(name, owner, ttl_ms, std::move(cb));
    mem_.extend(name, owner, ttl_ms,
                [this, cb = std::move(cb)](StatusOr<backend::ExtendReply> r) mutable {
                  sched_.runAfter(extend_reply_delay_ms,
                                  [this, cb = std::move(cb), r = std::move(r)]() mutable {
                                    record("extend_reply", "");
                                    cb(std::move(r));
                                  });
                });
  }
  void inspect(std::string_view name, backend::InspectCallback cb) override {
    mem_.inspect(name, std::move(cb));
  }
  void forceRelease(std::string_view name, backend::ForceReleaseCallback cb) override {
    record("force_release", name);
    mem_.forceRelease(name, std::move(cb));
  }
  void setReleaseListener(backend::ReleaseListener l) override {
    mem_.setReleaseListener(std::move(l));
  }
  void watchReleases(std::string_view name) override { mem_.watchReleases(name); }
  void unwatchReleases(std::string_view name) override { mem_.unwatchReleases(name); }
  backend::BackendHealth health() const override { return mem_.health(); }
  void setReadyListener(std::function<void()> l) override { ready_listener = std::move(l); }
  /// The backend came back: what a real backend does after an outage.
  void announceReady() {
    if (ready_listener) sched_.post([this] { ready_listener(); });
  }
  std::function<void()> ready_listener;
  void shutdown(std::function<void()> done) override { mem_.shutdown(std::move(done)); }

 private:
  void record(const char* op, std::string_view name) {
    calls.push_back(Call{op, std::string(name), sched_.nowUs()});
  }
  template <typename Cb>
  void fail(Cb cb, Status st) {
    sched_.post([cb = std::move(cb), st = std::move(st)] { cb(st); });
  }

  event::FakeScheduler& sched_;
  backend::MemoryBackend mem_;
};

}  // namespace sidelock::lock::testing
