#include "chaos/workload.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "chaos/fenced_register.h"
#include "support/http_client.h"

namespace sidelock::testing::chaos {

using nlohmann::json;

std::string acquireBody(int64_t ttl_ms, int64_t wait_ms) {
  return json{{"ttl_ms", ttl_ms}, {"wait_ms", wait_ms}}.dump();
}

namespace {

void sleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// One client's connection to its sidecar: reconnects after a failure.
class SidecarSession {
 public:
  SidecarSession(int port, int process, int client)
      : port_(port), process_(process), client_(client) {}

  /// Sends one POST and fills `op` with who, times and status (the caller logs it once it knows
  /// the rest). Returns the JSON body (null when there was no answer or it was not JSON).
  json post(Operation& op, const std::string& path, const std::string& body, int64_t timeout_ms) {
    op.process = process_;
    op.client = client_;
    op.invoke_us = nowUs();
    json answer;
    try {
      if (!http_) http_.emplace(HttpClient::tcp(port_));
      HttpResponse r = http_->request("POST", path, body, static_cast<int>(timeout_ms));
      op.status = r.status;
      answer = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
      if (!r.keep_alive) http_.reset();
    } catch (const std::exception&) {
      op.status = kNoAnswer;
      http_.reset();  // a late answer must not be read as the next request's
    }
    op.complete_us = nowUs();
    return answer;
  }

 private:
  int port_;
  int process_;
  int client_;
  std::optional<HttpClient> http_;
};

}  // namespace

Workload::Workload(History& history, WorkloadOptions options)
    : history_(history), options_(std::move(options)) {
  for (int i = 0; i < options_.clients; ++i) threads_.emplace_back([this, i] { runClient(i); });
}

Workload::~Workload() { stop(); }

void Workload::stop() {
  stopping_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool Workload::waitForMoreGrants(int64_t n, int64_t timeout_ms) const {
  const int64_t target = grants_.load() + n;
  const int64_t deadline = nowUs() + timeout_ms * 1000;
  while (grants_.load() < target) {
    if (nowUs() > deadline) return false;
    sleepMs(5);
  }
  return true;
}

std::optional<PausedWrite> Workload::pauseOneClientInCriticalSection(int64_t timeout_ms) {
  std::unique_lock lock(pause_mu_);
  paused_write_.reset();
  pause_requested_ = true;
  pause_done_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [this] { return paused_write_.has_value(); });
  pause_requested_ = false;
  return paused_write_;
}

HoldOutcomes Workload::holdOutcomes() const {
  std::lock_guard guard(outcomes_mu_);
  return outcomes_;
}

void Workload::pauseUntilOvertaken(const std::string& register_key, int64_t window_end_us,
                                   int64_t accepted_at_read, int process, int client) {
  FencedRegister observer(options_.resource_port);
  const size_t fault =
      history_.beginFault("client " + std::to_string(client) + " (sidecar " +
                          std::to_string(process) + ") paused inside its critical section");
  // Past its TTL, and until another holder wrote: then the late write is sure to be stale.
  const int64_t past_ttl_us = window_end_us + options_.ttl_ms * 1000;
  const int64_t give_up_us = window_end_us + (options_.wait_ms + 20 * options_.ttl_ms) * 1000;
  while (nowUs() < give_up_us &&
         (nowUs() < past_ttl_us || observer.acceptedWrites(register_key) <= accepted_at_read)) {
    sleepMs(5);
  }
  history_.endFault(fault);
}

void Workload::runClient(int index) {
  const int sidecars = static_cast<int>(options_.sidecar_ports.size());
  const int process = index % sidecars;
  const int client = index;
  const std::string lock =
      options_.locks[static_cast<size_t>(index / sidecars) % options_.locks.size()];
  const std::string register_key = options_.register_prefix + lock;
  const std::string base = "/v1/locks/" + lock;
  const int64_t timeout_ms = options_.wait_ms + options_.answer_slack_ms;
  SidecarSession session(options_.sidecar_ports[static_cast<size_t>(process)], process, client);
  FencedRegister resource(options_.resource_port);
  std::mt19937 rng(static_cast<unsigned>(client * 7919 + 1));
  std::uniform_int_distribution<int> jitter_ms(0, 5);

  while (!stopping_) {
    Operation acquire{.kind = OpKind::kAcquire,
                      .lock = lock,
                      .deadline_ms = options_.wait_ms,
                      .fenced = options_.fenced};
    const bool long_hold = options_.auto_renew_hold_ms > 0;
    json grant = session.post(
        acquire, base + "/acquire",
        long_hold
            ? json{{"ttl_ms", options_.ttl_ms}, {"wait_ms", options_.wait_ms}, {"auto_renew", true}}
                  .dump()
            : acquireBody(options_.ttl_ms, options_.wait_ms),
        timeout_ms);
    if (acquire.status != 200 || !grant.is_object()) {
      history_.add(acquire);
      sleepMs(10 + jitter_ms(rng));
      continue;
    }
    acquire.token = grant.value("token", uint64_t{0});
    acquire.validity_ms = grant.value("ttl_ms", int64_t{0});
    if (!long_hold) history_.add(acquire);  // a long hold's is logged once its length is known
    ++grants_;
    const std::string owner = grant.value("owner", "");
    const int64_t window_end_us = acquire.invoke_us + acquire.validity_ms * 1000;
    auto validity_left = [&] { return window_end_us - nowUs() > options_.write_margin_ms * 1000; };

    // Times one access to the register and logs it as `kind` under this grant.
    auto logged = [&](OpKind kind, auto access) {
      Operation op{.process = process,
                   .client = client,
                   .kind = kind,
                   .lock = lock,
                   .token = acquire.token,
                   .fenced = options_.fenced};
      op.invoke_us = nowUs();
      const auto result = access();
      op.complete_us = nowUs();
      op.status = result.accepted ? kResourceAccepted : kResourceRejected;
      history_.add(op);
      return result;
    };

    if (long_hold) {
      // The watchdog renews the lease; the client works until its hold ends, or until the
      // register refuses its token (someone was granted the lock after it: its lease was lost).
      const int64_t hold_end_us = nowUs() + options_.auto_renew_hold_ms * 1000;
      bool refused = false;
      while (!refused && !stopping_ && nowUs() < hold_end_us) {
        const FencedRegister::Access seen = logged(OpKind::kRead, [&] {
          return resource.read(register_key, acquire.token, options_.fenced);
        });
        refused = !seen.accepted || !logged(OpKind::kWrite, [&] {
                                       return resource.write(register_key, acquire.token,
                                                             seen.value + 1, options_.fenced);
                                     }).accepted;
        if (!refused) sleepMs(100);
      }
      Operation release{.kind = OpKind::kRelease,
                        .lock = lock,
                        .token = acquire.token,
                        .fenced = options_.fenced};
      session.post(release, base + "/release", json{{"owner", owner}}.dump(),
                   options_.answer_slack_ms);
      history_.add(release);
      // A release answered 200 says the lease was ours until then; any other answer reports the
      // loss, and the grant counts only for the TTL it was answered with.
      if (release.status == 200) {
        acquire.validity_ms = (release.invoke_us - acquire.invoke_us) / 1000;
      }
      history_.add(acquire);
      std::lock_guard guard(outcomes_mu_);
      outcomes_.refused_accesses += refused ? 1 : 0;
      if (release.status == 200) {
        ++outcomes_.held_through;
        if (refused) {
          outcomes_.silent_losses.push_back(
              "silent loss: lock " + lock + " token " + std::to_string(acquire.token) +
              " released with 200 although the register had seen a later holder");
        }
      } else if (release.status == kNoAnswer) {
        ++outcomes_.unanswered;
      } else {
        ++outcomes_.loss_reported;
      }
      continue;
    }
    if (validity_left()) {
      const FencedRegister::Access seen = logged(OpKind::kRead, [&] {
        return resource.read(register_key, acquire.token, options_.fenced);
      });
      if (seen.accepted && validity_left()) {
        const bool paused = pause_requested_.exchange(false);
        if (paused) {
          pauseUntilOvertaken(register_key, window_end_us, resource.acceptedWrites(register_key),
                              process, client);
        }
        const bool accepted =
            logged(OpKind::kWrite, [&] {
              return resource.write(register_key, acquire.token, seen.value + 1, options_.fenced);
            }).accepted;
        if (paused) {
          std::lock_guard guard(pause_mu_);
          paused_write_ = PausedWrite{lock, acquire.token, accepted};
          pause_done_.notify_all();
        }
      }
    }
    Operation release{
        .kind = OpKind::kRelease, .lock = lock, .token = acquire.token, .fenced = options_.fenced};
    session.post(release, base + "/release", json{{"owner", owner}}.dump(),
                 options_.answer_slack_ms);
    history_.add(release);
    sleepMs(jitter_ms(rng));
  }
}

}  // namespace sidelock::testing::chaos
