#include "api/pod_elections.h"

#include <algorithm>
#include <utility>

#include "api/election_api.h"
#include "common/invariant.h"
#include "common/log.h"

namespace sidelock::api {

struct PodElections::Election {
  Election(config::ElectionConfig c, metrics::Metrics::ElectionSeries s)
      : config(std::move(c)), series(s) {}

  const config::ElectionConfig config;
  const metrics::Metrics::ElectionSeries series;
  lock::AcquireTicket ticket;
  /// Bumped by each campaign: answers and events of an earlier one are ignored.
  uint64_t campaign_id = 0;
  bool campaigning = false;  // in line or leading
  bool leading = false;
  std::string owner;  // leading: the lease's owner id
  uint64_t term = 0;  // leading: its term
  int64_t elected_at_us = 0;
  lock::Backoff backoff{kRetryMinMs, kRetryMaxMs};
  /// config.health: probed from start() on; `unhealthy` from `failures` failures in a row until
  /// the next probe that succeeds. An unhealthy pod neither leads nor waits in line.
  health::HealthWatch health;
  bool unhealthy = false;
  /// Healthy again while the campaign onUnhealthy() cancelled had not answered yet: campaign once
  /// that answer (kCancelled) arrives.
  bool rejoin_when_cancelled = false;
  event::ScopedTimer retry;
  /// Monotonic µs until which this sidecar knows a leader was there (a read showed one with that
  /// much TTL left, or this sidecar leads); the leaderless gauge counts from it.
  int64_t leader_known_until_us = 0;
};

PodElections::PodElections(std::vector<config::ElectionConfig> elections, std::string identity,
                           lock::LockService& service, ElectionObservers& observers,
                           event::Scheduler& scheduler, metrics::Metrics& metrics,
                           health::Prober* prober)
    : identity_(std::move(identity)),
      service_(service),
      observers_(observers),
      scheduler_(scheduler),
      metrics_(metrics),
      prober_(prober) {
  for (config::ElectionConfig& c : elections) {
    if (!SL_INVARIANT(!c.health || prober != nullptr, "pod_election.health_without_prober")) {
      c.health.reset();
    }
    metrics::Metrics::ElectionSeries series = metrics.electionSeries(c.name);
    series.leader.Set(0);
    series.ttl_seconds.Set(static_cast<double>(c.ttl_ms) / 1000.0);
    auto e = std::make_unique<Election>(std::move(c), series);
    e->leader_known_until_us = scheduler.nowUs();  // leaderless from start-up until a read
    elections_.push_back(std::move(e));
  }
  if (!elections_.empty()) {
    metrics.addScrapeHook(alive_.guarded([this] { updateLeaderless(); }));
  }
}

PodElections::~PodElections() = default;

void PodElections::start() {
  for (const auto& e : elections_) {
    SL_LOG(kInfo, "pod_election.campaign", {"name", e->config.name}, {"candidate", identity_},
           {"ttl_ms", static_cast<long long>(e->config.ttl_ms)});
    // The leader of the name as every read of its observe group shows it: the leaderless gauge.
    observers_.listen(e->config.name, alive_.guarded([this, raw = e.get()](const LeaderView& v) {
      onLeaderRead(*raw, v);
    }));
    if (e->config.health && prober_ != nullptr) {
      // Not checked against health.max_probes here: the configuration's probes were counted at
      // load, and they start before any request's.
      e->health = prober_->watch(*e->config.health,
                                 alive_.guarded([this, raw = e.get()] { onUnhealthy(*raw); }),
                                 alive_.guarded([this, raw = e.get()] { onHealthy(*raw); }));
    }
    campaign(*e);
  }
}

void PodElections::campaign(Election& e) {
  if (stopped_ || e.unhealthy) return;
  const uint64_t id = ++e.campaign_id;
  e.campaigning = true;
  e.leading = false;
  // Elections live as long as this object (elections_ never shrinks): a raw pointer is safe
  // in callbacks guarded by alive_.
  Election* raw = &e;
  e.ticket = service_.acquire(
      campaignOptions(e.config.name, identity_, e.config.value, e.config.ttl_ms),
      alive_.guarded([this, raw, id](lock::AcquireResult r) {
        if (raw->campaign_id == id) onAnswer(*raw, std::move(r));
      }),
      alive_.guarded([this, raw, id](lock::LeaseEvent event) {
        // The lease released because the app is unhealthy (onUnhealthy) reaches us as kLost,
        // but the sidecar gave the leadership up: a resignation, as the README says.
        const bool resigned_unhealthy = event == lock::LeaseEvent::kLost && raw->unhealthy;
        countCampaignEvent(metrics_, resigned_unhealthy ? lock::LeaseEvent::kReleased : event);
        if (raw->campaign_id == id) onLeaseEvent(*raw, event);
      }));
}

void PodElections::onAnswer(Election& e, lock::AcquireResult r) {
  switch (r.status) {
    case lock::AcquireStatus::kGranted:
      metrics_.elections_won.Increment();
      if (stopped_ || e.unhealthy) {
        // Stopped (or the app turned sick) between grant and answer: resign at once rather than
        // lead for nobody.
        e.campaigning = false;
        service_.release(r.grant.lock, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
        return;
      }
      e.leading = true;
      e.owner = r.grant.owner;
      e.term = r.grant.token;
      e.elected_at_us = scheduler_.nowUs();
      e.leader_known_until_us =
          std::max(e.leader_known_until_us, e.elected_at_us + r.grant.ttl_ms * 1000);
      e.series.leader.Set(1);
      SL_LOG(kInfo, "pod_election.elected", {"name", e.config.name}, {"candidate", identity_},
             {"term", static_cast<unsigned long long>(e.term)});
      return;
    case lock::AcquireStatus::kCancelled:
      e.campaigning = false;  // onUnhealthy(), resignAll(), or the lock service shuts down
      if (std::exchange(e.rejoin_when_cancelled, false) && !stopped_ && !e.unhealthy) {
        e.backoff.reset();
        campaign(e);
      }
      return;
    case lock::AcquireStatus::kError:
      return campaignLater(e, r.error.message());
    case lock::AcquireStatus::kTooManyWaiters:
      return campaignLater(e, "too many waiters (locks.max_waiters)");
    case lock::AcquireStatus::kBusy:
    case lock::AcquireStatus::kLimitMismatch:
      // Not reached: a candidate waits until cancelled, and elections have no limit.
      return campaignLater(e, "the campaign ended without an election");
  }
}

void PodElections::onLeaseEvent(Election& e, lock::LeaseEvent event) {
  switch (event) {
    case lock::LeaseEvent::kRenewed:
    case lock::LeaseEvent::kCapped:  // no cap on a campaign
      if (e.leading) {
        e.leader_known_until_us =
            std::max(e.leader_known_until_us, scheduler_.nowUs() + e.config.ttl_ms * 1000);
      }
      return;
    case lock::LeaseEvent::kLost:
    case lock::LeaseEvent::kCapExpired: {
      const bool lasted = scheduler_.nowUs() - e.elected_at_us >= e.config.ttl_ms * 1000;
      e.leading = false;
      e.series.leader.Set(0);
      if (e.unhealthy) {
        SL_LOG(kInfo, "pod_election.resigned", {"name", e.config.name}, {"candidate", identity_},
               {"term", static_cast<unsigned long long>(e.term)}, {"reason", "unhealthy"});
      } else {
        SL_LOG(kWarn, "pod_election.lost", {"name", e.config.name}, {"candidate", identity_},
               {"term", static_cast<unsigned long long>(e.term)});
      }
      if (lasted) e.backoff.reset();  // a flapping backend is not hammered; a rare loss is quick
      return campaignLater(e, "leadership lost");
    }
    case lock::LeaseEvent::kReleased:
      e.leading = false;
      e.series.leader.Set(0);
      SL_LOG(kInfo, "pod_election.resigned", {"name", e.config.name}, {"candidate", identity_},
             {"term", static_cast<unsigned long long>(e.term)});
      // Only resignAll() resigns (nobody else knows the owner id); if not, campaign again.
      return campaignLater(e, "resigned");
  }
}

void PodElections::campaignLater(Election& e, std::string_view why) {
  e.campaigning = false;
  if (stopped_) return;
  if (e.unhealthy) {
    // onHealthy() campaigns again: no timer meanwhile.
    SL_LOG(kInfo, "pod_election.waits_for_health", {"name", e.config.name}, {"reason", why});
    return;
  }
  const int64_t delay_ms = e.backoff.next();
  SL_LOG(kInfo, "pod_election.campaign_again", {"name", e.config.name}, {"reason", why},
         {"in_ms", static_cast<long long>(delay_ms)});
  Election* raw = &e;
  e.retry.start(scheduler_, delay_ms, alive_.guarded([this, raw] { campaign(*raw); }));
}

void PodElections::resignAll() {
  if (stopped_) return;
  stopped_ = true;
  for (const auto& e : elections_) {
    e->retry.reset();
    e->health.reset();
    if (e->leading) {
      SL_LOG(kInfo, "pod_election.resign_on_shutdown", {"name", e->config.name},
             {"candidate", identity_}, {"term", static_cast<unsigned long long>(e->term)});
      service_.release(lock::LockId{lock::LockKind::kElection, e->config.name}, e->owner,
                       [](StatusOr<lock::ReleaseStatus>) {});
    } else if (e->campaigning) {
      e->ticket.cancel();  // leaves the line
    }
  }
}

void PodElections::onUnhealthy(Election& e) {
  if (stopped_ || e.unhealthy) return;
  e.unhealthy = true;
  e.retry.reset();
  SL_LOG(kWarn, "pod_election.unhealthy", {"name", e.config.name}, {"candidate", identity_},
         {"url", e.config.health->url.text}, {"leading", e.leading});
  if (e.leading) {
    // As an HTTP campaign's: released as unhealthy, the lease event (kLost) ends the term and
    // campaignLater() waits for onHealthy().
    service_.releaseUnhealthy(lock::LockId{lock::LockKind::kElection, e.config.name}, e.owner);
  } else if (e.campaigning) {
    e.ticket.cancel();  // leaves the line: a sick pod is never elected
  }
}

void PodElections::onHealthy(Election& e) {
  if (stopped_ || !e.unhealthy) return;
  e.unhealthy = false;
  SL_LOG(kInfo, "pod_election.healthy_again", {"name", e.config.name}, {"candidate", identity_});
  // A candidate again at once; an earlier term's answer or event may still be on its way, and
  // campaign() ignores those (campaign_id).
  if (!e.campaigning && !e.leading) {
    e.backoff.reset();
    campaign(e);
  } else if (e.campaigning && !e.leading) {
    e.rejoin_when_cancelled = true;  // the cancelled campaign's answer is still on its way
  }
}

void PodElections::onLeaderRead(Election& e, const LeaderView& view) {
  const int64_t now_us = scheduler_.nowUs();
  if (view.held) {
    e.leader_known_until_us = std::max(e.leader_known_until_us, now_us + view.ttl_ms * 1000);
  } else if (!e.leading) {
    // Nobody leads now: whatever TTL an earlier read showed is over.
    e.leader_known_until_us = std::min(e.leader_known_until_us, now_us);
  }
}

void PodElections::updateLeaderless() {
  const int64_t now_us = scheduler_.nowUs();
  for (const auto& e : elections_) {
    const int64_t leaderless_us =
        e->leading ? 0 : std::max<int64_t>(0, now_us - e->leader_known_until_us);
    e->series.leaderless_seconds.Set(static_cast<double>(leaderless_us / 1000) / 1000.0);
  }
}

}  // namespace sidelock::api
