#include "api/election_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/health_binding.h"
#include "api/json_object.h"
#include "api/route_helpers.h"
#include "common/log.h"
#include "http/path_pattern.h"

namespace sidelock::api {
namespace {

using nlohmann::json;

lock::LockId electionOf(std::string_view name) {
  return lock::LockId{lock::LockKind::kElection, std::string(name)};
}

/// A backend error of an election route: a backend that cannot record a leader would refuse the
/// kind with kFailedPrecondition, which is a 501 here, not an outage (every shipped backend
/// holds elections; Redlock since its quorum records the term on a majority).
Answer electionBackendErrorAnswer(const Status& status) {
  if (status.code() == StatusCode::kFailedPrecondition) {
    return errorAnswer(501, "not_supported", status.message());
  }
  return backendErrorAnswer(status);
}

void sendElectionBackendError(const http::ResponderPtr& res, const Status& status) {
  sendAnswer(res, electionBackendErrorAnswer(status));
}

/// A leader's value (campaign, proclaim): at most ElectionApi::kMaxValueBytes.
void checkValue(RequestBody& body, std::string_view value) {
  if (body.ok() && value.size() > ElectionApi::kMaxValueBytes) {
    body.setError("value is " + std::to_string(value.size()) + " bytes long; the limit is " +
                  std::to_string(ElectionApi::kMaxValueBytes));
  }
}

Answer notLeaderAnswer(std::string_view why) { return errorAnswer(409, "not_leader", why); }

void sendNotLeader(const http::ResponderPtr& res, std::string_view why) {
  sendAnswer(res, notLeaderAnswer(why));
}

}  // namespace

lock::AcquireOptions campaignOptions(std::string_view name, std::string_view candidate,
                                     std::string_view value, int64_t ttl_ms) {
  lock::AcquireOptions opts;
  opts.lock = electionOf(name);
  opts.ttl_ms = ttl_ms;
  opts.wait_ms = lock::kWaitUntilCancelledMs;
  opts.stream = true;
  opts.auto_renew = true;
  opts.max_hold_ms = lock::kWaitUntilCancelledMs;
  opts.candidate = candidate;
  opts.value = value;
  return opts;
}

void countCampaignEvent(metrics::Metrics& metrics, lock::LeaseEvent event) {
  if (event == lock::LeaseEvent::kReleased) metrics.election_resignations.Increment();
  if (event == lock::LeaseEvent::kLost || event == lock::LeaseEvent::kCapExpired) {
    metrics.election_lost.Increment();
  }
}

/// One campaign: waiting in line, then leading until it resigns, loses or its client leaves.
struct ElectionApi::Campaign {
  lock::AcquireTicket ticket;
  http::ResponderPtr responder;
  lock::LockId election;
  std::string candidate;
  std::string owner;  // once elected
  uint64_t term = 0;  // once elected
  std::shared_ptr<HealthHold> health;  // a health-bound campaign (health_binding.h)
  bool elected = false;
  bool finished = false;  // the answer or the stream is complete
  bool stepping_down = false;  // draining: `stepping_down` sent, resigns on close or deadline
  event::ScopedTimer step_down_deadline;
};

ElectionApi::ElectionApi(const config::LocksConfig& locks, lock::LockService& service,
                         LockApi& lock_api, metrics::Metrics& metrics, event::Scheduler& scheduler,
                         Options options)
    : locks_(locks),
      service_(service),
      lock_api_(lock_api),
      metrics_(metrics),
      scheduler_(scheduler),
      options_(std::move(options)),
      observers_(service, scheduler, metrics, options_.observe_reread_ms) {}

ElectionApi::~ElectionApi() = default;

std::vector<Route> ElectionApi::routes() {
  // The query is read strictly (checkQuery), as on every v1 route.
  auto bindNamed = [this](void (ElectionApi::*fn)(http::Request&, http::ResponderPtr),
                          QueryKeys keys = {}) {
    return [this, fn, keys = std::move(keys)](http::Request& req, http::ResponderPtr res) {
      if (!checkNameAllowed(req, res)) return;
      if (!checkQuery(req, res, keys)) return;
      if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
      (this->*fn)(req, std::move(res));
    };
  };
  return {
      {"POST", "/v1/elections/{name}/campaign", bindNamed(&ElectionApi::campaign)},
      {"GET", "/v1/elections/{name}", bindNamed(&ElectionApi::leader)},
      {"GET", "/v1/elections/{name}/observe", bindNamed(&ElectionApi::observe)},
      {"POST", "/v1/elections/{name}/proclaim", bindNamed(&ElectionApi::proclaim)},
      {"POST", "/v1/elections/{name}/resign", bindNamed(&ElectionApi::resign)},
      {"GET", kReadyPattern, bindNamed(&ElectionApi::ready, {"candidate"})},
  };
}

void ElectionApi::campaign(http::Request& req, http::ResponderPtr res) {
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kCandidate, BodyField::kValue, BodyField::kTtlMs, BodyField::kHealth});
  int64_t ttl_ms = locks_.default_ttl_ms;
  std::string_view candidate;
  std::string_view value;
  if (body.ok()) {
    body.readString(BodyField::kCandidate, candidate) &&
        body.readString(BodyField::kValue, value) &&
        body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, ttl_ms);
  }
  if (body.ok() && !body.has(BodyField::kCandidate)) body.setError("candidate is required");
  if (body.ok()) {
    if (std::string problem = candidateProblem(candidate); !problem.empty()) {
      body.setError(std::move(problem));
    }
  }
  checkValue(body, value);
  std::optional<health::HealthSpec> health_spec;
  readHealth(body, health_spec);
  if (body.ok() && health_spec && options_.health_prober == nullptr) {
    body.setError("health probes are not available on this sidecar");
  }
  if (!body.ok()) return sendBodyError(res, body);
  if (health_spec) {
    if (std::optional<Answer> refused = healthRefusal(*options_.health_prober, *health_spec)) {
      return sendAnswer(res, *refused);
    }
  }
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");

  // The connection is the campaign: in line until elected or until the client leaves.
  lock::AcquireOptions opts = campaignOptions(req.param("name"), candidate, value, ttl_ms);

  auto call = std::make_shared<Campaign>();
  if (health_spec) {
    call->health = std::make_shared<HealthHold>();
    call->health->spec = std::move(*health_spec);
    call->health->holder_listens = true;  // the campaign's stream (sidelock run --elect)
  }
  call->responder = res;
  call->election = opts.lock;
  call->candidate = opts.candidate;
  campaigns_.insert(call);

  auto on_event = alive_.guarded([this, call](lock::LeaseEvent e) {
    countCampaignEvent(metrics_, e);
    if (call->finished) return;
    JsonObject event;
    switch (e) {
      case lock::LeaseEvent::kRenewed:
        // ttl_ms: the validity left now, so a holder that must stop before the lease can expire
        // (sidelock run --elect) counts from what the backend confirmed, not from a full TTL.
        call->responder->writeChunk(
            event.text("event", "renewed")
                .text("name", call->election.name)
                .unsignedInteger("term", call->term)
                .integer("ttl_ms",
                         std::max<int64_t>(0, service_.validityLeftMs(call->election, call->owner)))
                .finish());
        return;
      case lock::LeaseEvent::kCapped:
        return;  // no cap on a campaign (max_hold_ms), so never sent
      case lock::LeaseEvent::kLost:
      case lock::LeaseEvent::kCapExpired: {
        const char* why = service_.lossReason();
        event.text("event", "lost")
            .text("name", call->election.name)
            .text("reason",
                  call->health && call->health->unhealthy
                      ? "unhealthy"  // resigned: its health endpoint failed (as a lock's hold)
                  : why != nullptr ? why
                                   : "the leader's lease expired or another candidate leads: "
                                     "renewals failed or found it gone")
            .unsignedInteger("term", call->term);
        break;
      }
      case lock::LeaseEvent::kReleased:
        call->responder->writeChunk(resignedLine(*call));
        call->responder->endStream();
        finishCampaign(call);
        return;
    }
    call->responder->writeChunk(event.finish());
    call->responder->endStream();
    finishCampaign(call);
  });

  auto done = alive_.guarded([this, call](lock::AcquireResult r) {
    const http::ResponderPtr& out = call->responder;
    if (call->finished) return;
    switch (r.status) {
      case lock::AcquireStatus::kGranted: {
        call->elected = true;
        call->owner = r.grant.owner;
        call->term = r.grant.token;
        if (!out->clientConnected()) {
          // Gone between grant and answer: resign now rather than lead for nobody.
          finishCampaign(call);
          service_.release(r.grant.lock, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
          return;
        }
        if (call->health) {
          if (std::optional<Answer> refused =
                  healthRefusal(*options_.health_prober, call->health->spec)) {
            // The limit filled up while this candidate waited in line: resign unseen.
            finishCampaign(call);
            service_.release(r.grant.lock, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
            return sendAnswer(out, *refused);
          }
          watchHealth(call->health, *options_.health_prober, service_, r.grant);
        }
        // Counted once announced: a grant given back unseen above is no win.
        metrics_.elections_won.Increment();
        SL_LOG(kInfo, "election.elected", {"name", call->election.name},
               {"candidate", call->candidate}, {"term", static_cast<unsigned long>(r.grant.token)});
        out->startStream(200, "application/x-ndjson");
        out->writeChunk(JsonObject()
                            .text("event", "elected")
                            .text("candidate", call->candidate)
                            .text("name", call->election.name)
                            .text("owner", r.grant.owner)
                            .unsignedInteger("term", r.grant.token)
                            .integer("ttl_ms", r.grant.ttl_ms)
                            .finish());
        return;
      }
      case lock::AcquireStatus::kTooManyWaiters:
        finishCampaign(call);
        return sendRetryLater(out, 429, "too_many_waiters",
                              "too many candidates and waiters are queued on this sidecar "
                              "(locks.max_waiters_per_lock / locks.max_waiters)",
                              r.retry_after_ms);
      case lock::AcquireStatus::kCancelled:
        finishCampaign(call);
        return sendError(out, 503, "shutting_down", "the sidecar is shutting down");
      case lock::AcquireStatus::kError:
        finishCampaign(call);
        return sendElectionBackendError(out, r.error);
      case lock::AcquireStatus::kBusy:
      case lock::AcquireStatus::kLimitMismatch:
        // Not reached: a candidate waits until cancelled, and elections have no limit.
        finishCampaign(call);
        return sendNotLeader(out, "the campaign ended without an election");
    }
  });

  std::function<void(lock::LeaseEvent)> events = std::move(on_event);
  if (call->health) events = endWatchWithLease(call->health, std::move(events));
  call->ticket = service_.acquire(std::move(opts), std::move(done), std::move(events));
  // Leaving the line, or resigning: the connection is the campaign.
  std::weak_ptr<Campaign> weak = call;
  res->onClientGone(alive_.guarded([this, weak] {
    auto c = weak.lock();
    if (!c || c->finished) return;
    if (c->stepping_down) stepDownRelease(c);  // counted before finish checks the step-downs
    finishCampaign(c);
    if (!c->elected) return c->ticket.cancel();
    if (!c->stepping_down) {
      service_.release(c->election, c->owner, [](StatusOr<lock::ReleaseStatus>) {});
    }
  }));
}

void ElectionApi::leader(http::Request& req, http::ResponderPtr res) {
  const std::string name(req.param("name"));
  service_.inspect(electionOf(name), [res, name](StatusOr<lock::LockState> state) {
    if (!state.isOk()) return sendElectionBackendError(res, state.status());
    json answer = {{"name", name}, {"leader", nullptr}};
    if (state->held) {
      answer["leader"] = json{{"candidate", state->leader.candidate},
                              {"value", state->leader.value},
                              {"term", state->token},
                              {"since_ms", state->leader.since_ms},
                              {"ttl_ms", state->ttl_ms}};
    }
    sendJson(res, 200, answer);
  });
}

void ElectionApi::observe(http::Request& req, http::ResponderPtr res) {
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  // One read first: a backend that cannot hold elections would be answered 501 like the other
  // routes, rather than with a stream that never says anything. A new observe group starts from
  // this read (no second read).
  std::string name(req.param("name"));
  service_.inspect(electionOf(name),
                   alive_.guarded([this, name, res](StatusOr<lock::LockState> state) {
                     if (!state.isOk() &&
                         state.status().code() == StatusCode::kFailedPrecondition) {
                       return sendElectionBackendError(res, state.status());
                     }
                     if (draining_) {
                       return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
                     }
                     if (!res->clientConnected()) return;  // gone meanwhile: nothing to add
                     observers_.add(name, res, std::move(state));
                   }));
}

// proclaim and resign with a request_id: a retry gets the first attempt's answer (or waits for it
// while the first runs) and never acts twice, as a lock's release (LockApi::answerOnce). Filed
// under the election's name and the owner; backend errors are not remembered (a retry runs).
void ElectionApi::proclaim(http::Request& req, http::ResponderPtr res) {
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kOwner, BodyField::kValue, BodyField::kRequestId});
  std::string_view owner;
  std::string_view value;
  std::string_view request_id;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        body.readString(BodyField::kValue, value) && readRequestId(body, request_id);
  }
  if (body.ok() && !body.has(BodyField::kValue)) body.setError("value is required");
  checkValue(body, value);
  if (!body.ok()) return sendBodyError(res, body);
  std::string name(req.param("name"));
  const std::string retry_scope = retryScope(name, owner, req.principal.get());
  lock_api_.answerOnce(
      replayKey(kProclaimRoute, retry_scope, request_id), body.fingerprint(), std::move(res),
      [this, name = std::move(name), owner = std::string(owner),
       value = std::string(value)](const LockApi::AnswerFn& answer_with) {
        service_.proclaim(
            electionOf(name), owner, value, [name, answer_with](StatusOr<lock::ProclaimResult> r) {
              if (!r.isOk()) return answer_with(electionBackendErrorAnswer(r.status()), false);
              if (r->status != lock::ProclaimStatus::kProclaimed) {
                return answer_with(notLeaderAnswer("this owner does not lead the election"), true);
              }
              answer_with(
                  Answer{200,
                         json{{"name", name}, {"term", r->term}, {"ttl_ms", r->ttl_ms}}.dump(),
                         {},
                         {},
                         0},
                  true);
            });
      });
}

void ElectionApi::resign(http::Request& req, http::ResponderPtr res) {
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body, {BodyField::kOwner, BodyField::kRequestId});
  std::string_view owner;
  std::string_view request_id;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        readRequestId(body, request_id);
  }
  if (!body.ok()) return sendBodyError(res, body);
  std::string name(req.param("name"));
  const std::string retry_scope = retryScope(name, owner, req.principal.get());
  lock_api_.answerOnce(
      replayKey(kResignRoute, retry_scope, request_id), body.fingerprint(), std::move(res),
      [this, name = std::move(name),
       owner = std::string(owner)](const LockApi::AnswerFn& answer_with) {
        service_.release(
            electionOf(name), owner, [name, answer_with](StatusOr<lock::ReleaseStatus> r) {
              if (!r.isOk()) return answer_with(electionBackendErrorAnswer(r.status()), false);
              if (*r != lock::ReleaseStatus::kReleased) {
                return answer_with(notLeaderAnswer("this owner does not lead the election (it "
                                                   "resigned, lost or never led)"),
                                   true);
              }
              answer_with(Answer{200, json{{"name", name}, {"resigned", true}}.dump(), {}, {}, 0},
                          true);
            });
      });
}

void ElectionApi::ready(http::Request& req, http::ResponderPtr res) {
  std::string candidate;
  if (!queryValue(req.query, "candidate", &candidate)) candidate = options_.identity;
  if (std::string problem = candidateProblem(candidate); !problem.empty()) {
    return sendError(res, 400, "bad_request",
                     options_.identity.empty() && req.query.empty()
                         ? "no candidate given and the sidecar has no identity ($POD_NAME or "
                           "the host name)"
                         : problem);
  }
  const std::string name(req.param("name"));
  service_.inspect(electionOf(name), [res, name, candidate](StatusOr<lock::LockState> state) {
    if (!state.isOk()) return sendElectionBackendError(res, state.status());
    if (!state->held || state->leader.candidate != candidate) {
      return sendError(res, 503, "not_leader",
                       state->held ? "\"" + candidate + "\" does not lead \"" + name + "\""
                                   : "\"" + name + "\" has no leader");
    }
    sendJson(res, 200,
             json{{"name", name}, {"candidate", candidate}, {"leader", true},
                  {"term", state->token}});
  });
}

void ElectionApi::setDraining(bool draining, int64_t step_down_ms,
                              std::function<void()> on_stepped_down) {
  draining_ = draining;
  if (!draining) return;
  on_stepped_down_ = std::move(on_stepped_down);
  // Copied: the callbacks these start change campaigns_ (on later turns, but safely either way).
  const auto campaigns = campaigns_;
  for (const auto& c : campaigns) {
    if (c->finished) continue;
    if (!c->elected) {
      c->ticket.cancel();
    } else if (step_down_ms <= 0) {
      SL_LOG(kInfo, "election.resign_on_shutdown", {"name", c->election.name},
             {"candidate", c->candidate});
      service_.release(c->election, c->owner, [](StatusOr<lock::ReleaseStatus>) {});
    } else {
      // The client's process may still be running: tell it to stop, keep the lease renewed, and
      // resign when it closes the stream (onClientGone) or at the deadline.
      SL_LOG(kInfo, "election.step_down_on_shutdown", {"name", c->election.name},
             {"candidate", c->candidate}, {"resign_in_ms", static_cast<long long>(step_down_ms)});
      c->stepping_down = true;
      c->responder->writeChunk(JsonObject()
                                   .text("event", "stepping_down")
                                   .text("name", c->election.name)
                                   .text("candidate", c->candidate)
                                   .unsignedInteger("term", c->term)
                                   .text("reason", "shutting_down")
                                   .integer("resign_in_ms", step_down_ms)
                                   .finish());
      std::weak_ptr<Campaign> weak = c;
      c->step_down_deadline.start(scheduler_, step_down_ms, alive_.guarded([this, weak] {
        auto live = weak.lock();
        if (!live || live->finished) return;
        SL_LOG(kInfo, "election.step_down_deadline", {"name", live->election.name},
               {"candidate", live->candidate});
        // The candidate hears `resigned` and the stream ends before the release goes out, not
        // when it completes (the lease event kReleased): the nodes that answer first free the
        // election for a candidate elsewhere while a stalled one (Redlock) is still waited for.
        stepDownRelease(live);  // counted first: finishing below checks the step-downs
        live->responder->writeChunk(resignedLine(*live));
        live->responder->endStream();
        finishCampaign(live);
      }));
    }
  }
  observers_.endAll();
  checkSteppedDown();
}

void ElectionApi::finishCampaign(const std::shared_ptr<Campaign>& c) {
  c->finished = true;
  c->step_down_deadline.reset();
  campaigns_.erase(c);
  if (c->stepping_down) checkSteppedDown();
}

std::string ElectionApi::resignedLine(const Campaign& c) {
  return JsonObject()
      .text("event", "resigned")
      .text("name", c.election.name)
      .unsignedInteger("term", c.term)
      .finish();
}

void ElectionApi::stepDownRelease(const std::shared_ptr<Campaign>& c) {
  ++step_down_releases_;
  service_.release(c->election, c->owner,
                   alive_.guarded([this](StatusOr<lock::ReleaseStatus>) {
                     --step_down_releases_;
                     checkSteppedDown();
                   }));
}

void ElectionApi::checkSteppedDown() {
  if (!on_stepped_down_ || step_down_releases_ > 0) return;
  for (const auto& c : campaigns_) {
    if (c->stepping_down && !c->finished) return;
  }
  // A later turn: this may run inside a lease event or a release callback of the lock service.
  scheduler_.runAfter(0, alive_.guarded([this] {
    if (!on_stepped_down_) return;
    auto done = std::move(on_stepped_down_);
    on_stepped_down_ = nullptr;
    done();
  }));
}

}  // namespace sidelock::api
