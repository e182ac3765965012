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
  /// With fail_acquire: the acquire is carried out all the same (its answer was lost: a timeout
  /// or a link lost under it, Status::outcomeUnknown).
  bool acquire_applied_anyway = false;
  std::optional<Status> fail_extend;
  std::optional<Status> fail_release;
  int64_t extend_reply_delay_ms = 0;   // the extend is applied at once, its answer comes later
  int64_t release_reply_delay_ms = 0;  // hand-offs only: applied at once, answered later
  // Plain releases: applied at once, answered later (Redlock: a majority freed the name and its
  // announcement went out, a slower node has not answered).
  int64_t plain_release_reply_delay_ms = 0;

  void start() override {}
  // Hand-off is off unless a test turns it on, so the other tests see plain release + acquire.
  bool hand_off = false;
  bool canHandOff() const override { return hand_off; }
  void run(const backend::Operation& op, backend::OutcomeCallback cb) override {
    using backend::Verb;
    std::optional<Status> failure;
    int64_t delay_ms = 0;
    const char* recorded = nullptr;  // what calls[] shows ("release_grant" for a hand-off)
    switch (op.verb) {
      case Verb::kAcquire:
        recorded = "acquire";
        failure = fail_acquire;
        break;
      case Verb::kRelease:
        recorded = "release";
        failure = fail_release;
        delay_ms = plain_release_reply_delay_ms;
        break;
      case Verb::kHandOff:
        recorded = "release_grant";
        failure = fail_release;
        delay_ms = release_reply_delay_ms;
        break;
      case Verb::kExtend:
        recorded = "extend";
        failure = fail_extend;
        delay_ms = extend_reply_delay_ms;
        break;
      case Verb::kForceRelease:
        recorded = "force_release";
        break;
      case Verb::kWithdraw:
        recorded = "withdraw";
        break;
      case Verb::kProclaim:
        recorded = "proclaim";
        break;
      case Verb::kInspect:
        break;
    }
    if (recorded != nullptr) record(recorded, op.name);
    if (failure) {
      if (op.verb == Verb::kAcquire && acquire_applied_anyway) {
        mem_.run(op, [](StatusOr<backend::Outcome>) {});
      }
      sched_.post([cb = std::move(cb), st = *failure] { cb(st); });
      return;
    }
    if (delay_ms == 0) return mem_.run(op, std::move(cb));
    const bool is_extend = op.verb == Verb::kExtend;
    mem_.run(op, [this, cb = std::move(cb), delay_ms,
                  is_extend](StatusOr<backend::Outcome> r) mutable {
      sched_.runAfter(delay_ms, [this, cb = std::move(cb), r = std::move(r), is_extend]() mutable {
        if (is_extend) record("extend_reply", "");
        cb(std::move(r));
      });
    });
  }
  // Multi-locks in one step (off unless a test turns it on: the others see names taken one by
  // one). fail_acquire_all fails it like fail_acquire (acquire_applied_anyway applies too).
  bool all_at_once = false;
  std::optional<Status> fail_acquire_all;
  bool acquiresAllAtOnce() const override { return all_at_once; }
  void acquireAll(const std::vector<std::string>& names, std::string_view owner, int64_t ttl_ms,
                  std::string_view holder, backend::AllOutcomeCallback cb) override {
    record("acquire_all", "");
    if (fail_acquire_all) {
      if (acquire_applied_anyway) {
        mem_.acquireAll(names, owner, ttl_ms, holder, [](StatusOr<backend::AllOutcome>) {});
      }
      sched_.post([cb = std::move(cb), st = *fail_acquire_all] { cb(st); });
      return;
    }
    mem_.acquireAll(names, owner, ttl_ms, holder, std::move(cb));
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

  event::FakeScheduler& sched_;
  backend::MemoryBackend mem_;
};

}  // namespace sidelock::lock::testing
