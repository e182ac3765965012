#include "metrics/metrics.h"

#include <dirent.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/invariant.h"

namespace sidelock::metrics {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

double readBootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double v = 0;
      in >> v;
      return v;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

const prometheus::Histogram::BucketBoundaries& waitBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
      1,     2.5,    5,     10,   30,    60,   120, 300,  600};
  return kBuckets;
}

const prometheus::Histogram::BucketBoundaries& latencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
  return kBuckets;
}

Metrics::Metrics(std::string version)
    : registry_(std::make_shared<prometheus::Registry>()),
      acquire_total(BuildCounter()
                        .Name("sidelock_acquire_total")
                        .Help("Acquire requests by lock kind and final result (acquired, busy, "
                              "error, too_many_waiters, cancelled, limit_mismatch).")
                        .Register(*registry_)),
      acquire_contended_total(BuildCounter()
                                  .Name("sidelock_acquire_contended_total")
                                  .Help("Acquire requests that found the lock (all permits) held "
                                        "at least once, by lock kind.")
                                  .Register(*registry_)),
      acquire_wait_seconds(BuildHistogram()
                               .Name("sidelock_acquire_wait_seconds")
                               .Help("Time from an acquire request to its outcome, by lock kind.")
                               .Register(*registry_)),
      grants_undelivered(BuildCounter()
                             .Name("sidelock_grants_undelivered_total")
                             .Help("Grants given back because the client never read them: it "
                                   "hung up before the answer went out, or reset the "
                                   "connection after it.")
                             .Register(*registry_)
                             .Add({})),
      forced_releases(BuildCounter()
                          .Name("sidelock_forced_releases_total")
                          .Help("Leases an operator freed with the admin force release, "
                                "whoever held them.")
                          .Register(*registry_)
                          .Add({})),
      unanswered_acquires_total(
          BuildCounter()
              .Name("sidelock_unanswered_acquires_total")
              .Help("Acquires that went out to the backend and got no answer (a timeout, a link "
                    "lost under them), so may have been granted without anybody being told, by "
                    "what became of that possible grant: released (given back: it had been "
                    "granted), not_granted (given back: nothing was there), gave_up (the backend "
                    "was not reached before its TTL ended it), left_to_owner (the caller chose "
                    "the owner id: the caller may release it, else its TTL ends it).")
              .Register(*registry_)),
      unanswered_released(unanswered_acquires_total.Add({{"outcome", "released"}})),
      unanswered_not_granted(unanswered_acquires_total.Add({{"outcome", "not_granted"}})),
      unanswered_gave_up(unanswered_acquires_total.Add({{"outcome", "gave_up"}})),
      unanswered_left_to_owner(unanswered_acquires_total.Add({{"outcome", "left_to_owner"}})),
      unreplicated_grants_total(
          BuildCounter()
              .Name("sidelock_unreplicated_grants_total")
              .Help("Sentinel grants given back because fewer than backend.sentinel.wait_replicas "
                    "replicas acknowledged them (or their WAIT took their validity), by what "
                    "became of the give-back: released (its release freed the grant), not_held "
                    "(it found the grant gone), gave_up (never run: the grant's TTL ended first, "
                    "shutdown, or a permit or reader release refused once), dropped (too many "
                    "waiting for the master).")
              .Register(*registry_)),
      unreplicated_released(unreplicated_grants_total.Add({{"outcome", "released"}})),
      unreplicated_not_held(unreplicated_grants_total.Add({{"outcome", "not_held"}})),
      unreplicated_gave_up(unreplicated_grants_total.Add({{"outcome", "gave_up"}})),
      unreplicated_dropped(unreplicated_grants_total.Add({{"outcome", "dropped"}})),
      waiters(BuildGauge()
                  .Name("sidelock_waiters")
                  .Help("Acquire requests currently queued waiting for a lock.")
                  .Register(*registry_)
                  .Add({})),
      request_id_bytes(BuildGauge()
                           .Name("sidelock_request_id_bytes")
                           .Help("Bytes held by answers remembered for request_id retries "
                                 "(at most locks.max_request_id_bytes).")
                           .Register(*registry_)
                           .Add({})),
      held_locks(BuildGauge()
                     .Name("sidelock_held_locks")
                     .Help("Leases granted by this sidecar that are still held.")
                     .Register(*registry_)
                     .Add({})),
      oldest_lease_age(BuildGauge()
                           .Name("sidelock_oldest_lease_age_seconds")
                           .Help("Seconds since the oldest lease still held through this sidecar "
                                 "was granted; 0 when none is held.")
                           .Register(*registry_)
                           .Add({})),
      held_locks_by_holder(BuildGauge()
                               .Name("sidelock_held_locks_by_holder")
                               .Help("Leases granted by this sidecar that are still held, by "
                                     "holder label: the metrics.holder_top_n holders with the "
                                     "most, every other lease in holder=\"other\".")
                               .Register(*registry_)),
      hold_seconds(BuildHistogram()
                       .Name("sidelock_hold_seconds")
                       .Help("How long leases were held: grant to release, expiry or loss.")
                       .Register(*registry_)
                       .Add({}, waitBuckets())),
      lease_expired(BuildCounter()
                        .Name("sidelock_lease_expired_total")
                        .Help("Leases whose TTL ran out before they were released.")
                        .Register(*registry_)
                        .Add({})),
      lease_lost(BuildCounter()
                     .Name("sidelock_lease_lost_total")
                     .Help("Leases the sidecar found gone or owned by another while renewing.")
                     .Register(*registry_)
                     .Add({})),
      release_total(BuildCounter()
                        .Name("sidelock_release_total")
                        .Help("Release requests by result.")
                        .Register(*registry_)),
      release_released(release_total.Add({{"result", "released"}})),
      release_not_owner(release_total.Add({{"result", "not_owner"}})),
      release_not_held(release_total.Add({{"result", "not_held"}})),
      release_lease_lost(release_total.Add({{"result", "lease_lost"}})),
      release_error(release_total.Add({{"result", "error"}})),
      extend_total(BuildCounter()
                       .Name("sidelock_extend_total")
                       .Help("Extend requests from clients by result.")
                       .Register(*registry_)),
      extend_extended(extend_total.Add({{"result", "extended"}})),
      extend_not_owner(extend_total.Add({{"result", "not_owner"}})),
      extend_not_held(extend_total.Add({{"result", "not_held"}})),
      extend_lease_lost(extend_total.Add({{"result", "lease_lost"}})),
      extend_error(extend_total.Add({{"result", "error"}})),
      renew_total(BuildCounter()
                      .Name("sidelock_renew_total")
                      .Help("Watchdog renewals by result (renewed, lost, error, capped).")
                      .Register(*registry_)),
      renew_renewed(renew_total.Add({{"result", "renewed"}})),
      renew_lost(renew_total.Add({{"result", "lost"}})),
      renew_error(renew_total.Add({{"result", "error"}})),
      renew_capped(renew_total.Add({{"result", "capped"}})),
      wakeups(BuildCounter()
                  .Name("sidelock_wakeups_total")
                  .Help("Release notifications (pub/sub) that woke a local waiter.")
                  .Register(*registry_)
                  .Add({})),
      lock_delay_refusals(BuildCounter()
                              .Name("sidelock_lock_delay_refusals_total")
                              .Help("Acquires answered 409 locked because a lock-delay ran.")
                              .Register(*registry_)
                              .Add({})),
      lock_delays_applied(BuildCounter()
                              .Name("sidelock_lock_delays_applied_total")
                              .Help("Lock-delays started, by cause: a lease of this sidecar "
                                    "expired unreleased or was released as unhealthy, or a force "
                                    "release through this sidecar freed a lease with a delay.")
                              .Register(*registry_)),
      lock_delays_expired(lock_delays_applied.Add({{"cause", "expired"}})),
      lock_delays_forced(lock_delays_applied.Add({{"cause", "forced"}})),
      lock_delays_unhealthy(lock_delays_applied.Add({{"cause", "unhealthy"}})),
      elections_won(BuildCounter()
                        .Name("sidelock_elections_won_total")
                        .Help("Campaigns through this sidecar that were elected leader.")
                        .Register(*registry_)
                        .Add({})),
      election_leadership_lost_total(
          BuildCounter()
              .Name("sidelock_election_leadership_lost_total")
              .Help("Leaders through this sidecar that lost leadership without resigning, by "
                    "reason (lost: the lease was found gone or another's, or ran out).")
              .Register(*registry_)),
      election_lost(election_leadership_lost_total.Add({{"reason", "lost"}})),
      election_resignations(BuildCounter()
                                .Name("sidelock_election_resignations_total")
                                .Help("Leaders through this sidecar that resigned (the resign "
                                      "route, their client hanging up, or shutdown).")
                                .Register(*registry_)
                                .Add({})),
      election_observers(BuildGauge()
                             .Name("sidelock_election_observers")
                             .Help("Observe streams open on this sidecar.")
                             .Register(*registry_)
                             .Add({})),
      lock_event_streams(BuildGauge()
                             .Name("sidelock_lock_event_streams")
                             .Help("Lock event streams (GET /v1/locks/{name}/events) open on this "
                                   "sidecar.")
                             .Register(*registry_)
                             .Add({})),
      lock_events_sent_total(BuildCounter()
                                 .Name("sidelock_lock_events_sent_total")
                                 .Help("Lock event lines written to event streams, by type.")
                                 .Register(*registry_)),
      election_leader(BuildGauge()
                          .Name("sidelock_election_leader")
                          .Help("Configured elections: 1 while this sidecar's identity leads, "
                                "else 0.")
                          .Register(*registry_)),
      election_leaderless_seconds(
          BuildGauge()
              .Name("sidelock_election_leaderless_seconds")
              .Help("Configured elections: seconds since this sidecar last knew of a leader "
                    "(anybody's), 0 while there is one.")
              .Register(*registry_)),
      election_ttl_seconds(BuildGauge()
                               .Name("sidelock_election_ttl_seconds")
                               .Help("Configured elections: the leader's lease TTL.")
                               .Register(*registry_)),
      health_probes_total(BuildCounter()
                              .Name("sidelock_health_probes_total")
                              .Help("Probes of apps' health endpoints by result.")
                              .Register(*registry_)),
      health_probe_ok(health_probes_total.Add({{"result", "ok"}})),
      health_probe_failed(health_probes_total.Add({{"result", "failed"}})),
      health_probe_timeout(health_probes_total.Add({{"result", "timeout"}})),
      health_probe_refused(health_probes_total.Add({{"result", "refused"}})),
      health_probes_active(BuildGauge()
                               .Name("sidelock_health_probes")
                               .Help("Distinct health endpoints being probed.")
                               .Register(*registry_)
                               .Add({})),
      leases_released_unhealthy(BuildCounter()
                                    .Name("sidelock_leases_released_unhealthy_total")
                                    .Help("Leases released because their health endpoint "
                                          "failed.")
                                    .Register(*registry_)
                                    .Add({})),
      backend_up(BuildGauge()
                     .Name("sidelock_backend_up")
                     .Help("1 if the backend node is connected and answering, else 0.")
                     .Register(*registry_)),
      backend_request_seconds(BuildHistogram()
                                  .Name("sidelock_backend_request_seconds")
                                  .Help("Latency of backend node requests by operation.")
                                  .Register(*registry_)),
      backend_errors_total(BuildCounter()
                               .Name("sidelock_backend_errors_total")
                               .Help("Backend node request failures by kind (timeout, "
                                     "disconnected, reply).")
                               .Register(*registry_)),
      backend_reconnects_total(BuildCounter()
                                   .Name("sidelock_backend_reconnects_total")
                                   .Help("Connection attempts to a backend node after the first.")
                                   .Register(*registry_)),
      backend_ready(BuildGauge()
                        .Name("sidelock_backend_ready")
                        .Help("1 if the backend can grant locks (Redlock: a voting majority is "
                              "up), else 0.")
                        .Register(*registry_)
                        .Add({})),
      backend_topology_changes_total(
          BuildCounter()
              .Name("sidelock_backend_topology_changes_total")
              .Help("Times the backend's view of the Redis topology changed (sentinel: "
                    "switch_master, readonly, reresolve; cluster: moved, slots_refresh)")
              .Register(*registry_)),
      backend_cluster_redirects_total(
          BuildCounter()
              .Name("sidelock_backend_cluster_redirects_total")
              .Help("Redis Cluster redirections followed, by kind (moved, ask).")
              .Register(*registry_)),
      redlock_quorum_failures(BuildCounter()
                                  .Name("sidelock_redlock_quorum_failures_total")
                                  .Help("Redlock attempts that could not reach a majority of "
                                        "nodes (down, timed out or not voting).")
                                  .Register(*registry_)
                                  .Add({})),
      redlock_unsettled_reads_total(
          BuildCounter()
              .Name("sidelock_redlock_unsettled_reads_total")
              .Help("Redlock reads of a lease whose holding nodes named different tokens, by "
                    "outcome (settled: they agreed when read again; gave_up: not within 2 x "
                    "node_timeout_ms).")
              .Register(*registry_)),
      redlock_reads_settled(redlock_unsettled_reads_total.Add({{"outcome", "settled"}})),
      redlock_reads_gave_up(redlock_unsettled_reads_total.Add({{"outcome", "gave_up"}})),
      redlock_validity_seconds(BuildHistogram()
                                   .Name("sidelock_redlock_validity_seconds")
                                   .Help("Lease validity remaining at grant (ttl - elapsed - "
                                         "drift).")
                                   .Register(*registry_)
                                   .Add({}, waitBuckets())),
      http_requests_total(
          BuildCounter()
              .Name("sidelock_http_requests_total")
              .Help("API requests by protocol (http, grpc), route and HTTP status code.")
              .Register(*registry_)),
      http_request_seconds(BuildHistogram()
                               .Name("sidelock_http_request_seconds")
                               .Help("API request latency by protocol (http, grpc) and route (to "
                                     "the first response byte).")
                               .Register(*registry_)),
      http_in_flight(BuildGauge()
                         .Name("sidelock_http_in_flight_requests")
                         .Help("API requests (HTTP and gRPC) received and not yet answered.")
                         .Register(*registry_)
                         .Add({})),
      http_connections(BuildGauge()
                           .Name("sidelock_http_connections")
                           .Help("Open HTTP client connections (TCP and Unix socket).")
                           .Register(*registry_)
                           .Add({})),
      grpc_connections(BuildGauge()
                           .Name("sidelock_grpc_connections")
                           .Help("Open gRPC client connections (HTTP/2; TCP and Unix socket).")
                           .Register(*registry_)
                           .Add({})),
      grpc_calls(BuildGauge()
                     .Name("sidelock_grpc_calls")
                     .Help("gRPC calls in progress over every connection: unary calls in "
                           "flight, streaming calls (Hold, HoldPermit, Events, Watch, ...) open.")
                     .Register(*registry_)
                     .Add({})),
      http_connections_rejected(BuildCounter()
                                    .Name("sidelock_http_connections_rejected_total")
                                    .Help("Connections answered 503 (or closed) at accept "
                                          "because of max_connections or "
                                          "max_connections_per_peer.")
                                    .Register(*registry_)
                                    .Add({})),
      http_connections_evicted(BuildCounter()
                                   .Name("sidelock_http_connections_evicted_total")
                                   .Help("Idle keep-alive connections closed to admit a new "
                                         "client at max_connections.")
                                   .Register(*registry_)
                                   .Add({})),
      http_stream_holds(BuildGauge()
                            .Name("sidelock_http_stream_holds")
                            .Help("Connections holding a streamed response (counted against "
                                  "listen.max_stream_holds, not max_connections).")
                            .Register(*registry_)
                            .Add({})),
      http_slow_streams_closed(BuildCounter()
                                   .Name("sidelock_http_slow_streams_closed_total")
                                   .Help("Connections closed because the reader of their "
                                         "streamed response fell more than the stream backlog "
                                         "limit behind.")
                                   .Register(*registry_)
                                   .Add({})),
      internal_errors(BuildCounter()
                          .Name("sidelock_internal_errors_total")
                          .Help("Internal consistency checks that failed: a bug in sidelock "
                                "(its log names the check). Expected to stay 0.")
                          .Register(*registry_)
                          .Add({})) {
  BuildGauge()
      .Name("sidelock_build_info")
      .Help("Build information; always 1.")
      .Register(*registry_)
      .Add({{"version", std::move(version)}})
      .Set(1);
  // Present (at 0) with every backend, like the Redlock series: dashboards and alerts need not
  // care which backend a sidecar runs.
  for (const char* reason : {"switch_master", "readonly", "reresolve"}) {
    backend_topology_changes_total.Add({{"reason", reason}});
  }
  process_rss_ = &BuildGauge()
                      .Name("process_resident_memory_bytes")
                      .Help("Resident memory size in bytes.")
                      .Register(*registry_)
                      .Add({});
  process_vms_ = &BuildGauge()
                      .Name("process_virtual_memory_bytes")
                      .Help("Virtual memory size in bytes.")
                      .Register(*registry_)
                      .Add({});
  process_cpu_ = &BuildCounter()
                      .Name("process_cpu_seconds_total")
                      .Help("Total user and system CPU time spent in seconds.")
                      .Register(*registry_)
                      .Add({});
  process_open_fds_ = &BuildGauge()
                           .Name("process_open_fds")
                           .Help("Number of open file descriptors.")
                           .Register(*registry_)
                           .Add({});
  process_max_fds_ = &BuildGauge()
                          .Name("process_max_fds")
                          .Help("Maximum number of open file descriptors.")
                          .Register(*registry_)
                          .Add({});
  process_start_time_ = &BuildGauge()
                             .Name("process_start_time_seconds")
                             .Help("Start time of the process since unix epoch in seconds.")
                             .Register(*registry_)
                             .Add({});
  updateProcessMetrics();
  acquireFor("mutex");
  held_by_other_holders_ = &held_locks_by_holder.Add({{"holder", std::string(kOtherHolders)}});
}

Metrics::AcquireMetrics& Metrics::acquireFor(std::string_view kind) {
  for (auto& [name, m] : acquire_kinds_) {
    if (name == kind) return *m;
  }
  const std::string k(kind);
  auto result = [&](const char* r) -> prometheus::Counter& {
    return acquire_total.Add({{"kind", k}, {"result", r}});
  };
  acquire_kinds_.emplace_back(
      k, std::make_unique<AcquireMetrics>(
             AcquireMetrics{result("acquired"), result("busy"), result("error"),
                            result("limit_mismatch"), result("too_many_waiters"),
                            result("cancelled"), acquire_contended_total.Add({{"kind", k}}),
                            acquire_wait_seconds.Add({{"kind", k}}, waitBuckets())}));
  return *acquire_kinds_.back().second;
}

void Metrics::publishHeldByHolder(std::vector<HolderLeases> counts, int64_t unlabelled) {
  const size_t top = std::min(holder_top_n_, counts.size());
  std::partial_sort(counts.begin(), counts.begin() + static_cast<ptrdiff_t>(top), counts.end(),
                    [](const HolderLeases& a, const HolderLeases& b) {
                      return a.leases != b.leases ? a.leases > b.leases : a.holder < b.holder;
                    });
  int64_t others = unlabelled;
  for (size_t i = top; i < counts.size(); ++i) others += counts[i].leases;
  // The top's series, reusing those of holders still in it (at most top_n: a linear scan).
  std::vector<std::pair<std::string, prometheus::Gauge*>> kept;
  kept.reserve(top);
  for (size_t i = 0; i < top; ++i) {
    const HolderLeases& h = counts[i];
    if (h.holder == kOtherHolders) {
      others += h.leases;
      continue;
    }
    auto it = std::find_if(holder_series_.begin(), holder_series_.end(),
                           [&h](const auto& s) { return s.first == h.holder; });
    prometheus::Gauge* gauge = nullptr;
    if (it != holder_series_.end()) {
      gauge = it->second;
      it->second = nullptr;  // taken: not removed below
    } else {
      gauge = &held_locks_by_holder.Add({{"holder", std::string(h.holder)}});
    }
    gauge->Set(static_cast<double>(h.leases));
    kept.emplace_back(std::string(h.holder), gauge);
  }
  for (const auto& [holder, gauge] : holder_series_) {
    if (gauge != nullptr) held_locks_by_holder.Remove(gauge);
  }
  holder_series_ = std::move(kept);
  held_by_other_holders_->Set(static_cast<double>(others));
}

Metrics::ElectionSeries Metrics::electionSeries(std::string_view name) {
  const prometheus::Labels labels{{"election", std::string(name)}};
  return ElectionSeries{election_leader.Add(labels), election_leaderless_seconds.Add(labels),
                        election_ttl_seconds.Add(labels)};
}

NodeMetrics& Metrics::node(std::string_view address) { return makeNode(address, true); }

NodeMetrics& Metrics::nodeWithoutUpGauge(std::string_view label) { return makeNode(label, false); }

NodeMetrics& Metrics::makeNode(std::string_view label, bool with_up_gauge) {
  for (auto& [name, m] : nodes_) {
    if (name == label) return *m;
  }
  auto m = std::make_unique<NodeMetrics>();
  const std::string node(label);
  if (with_up_gauge) m->up = &backend_up.Add({{"node", node}});
  m->reconnects = &backend_reconnects_total.Add({{"node", node}});
  m->errors_timeout = &backend_errors_total.Add({{"node", node}, {"kind", "timeout"}});
  m->errors_disconnected = &backend_errors_total.Add({{"node", node}, {"kind", "disconnected"}});
  m->errors_reply = &backend_errors_total.Add({{"node", node}, {"kind", "reply"}});
  m->noscript_reloads = &backend_errors_total.Add({{"node", node}, {"kind", "noscript"}});
  auto latency = [&](const char* op) {
    return &backend_request_seconds.Add({{"node", node}, {"op", op}}, latencyBuckets());
  };
  m->latency_acquire = latency("acquire");
  m->latency_release = latency("release");
  m->latency_extend = latency("extend");
  m->latency_inspect = latency("inspect");
  m->latency_other = latency("other");
  nodes_.emplace_back(node, std::move(m));
  return *nodes_.back().second;
}

void Metrics::forgetNode(std::string_view address) {
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    if (it->first != address) continue;
    NodeMetrics& m = *it->second;
    backend_up.Remove(m.up);
    backend_reconnects_total.Remove(m.reconnects);
    for (prometheus::Counter* c :
         {m.errors_timeout, m.errors_disconnected, m.errors_reply, m.noscript_reloads}) {
      backend_errors_total.Remove(c);
    }
    for (prometheus::Histogram* h : {m.latency_acquire, m.latency_release, m.latency_extend,
                                     m.latency_inspect, m.latency_other}) {
      backend_request_seconds.Remove(h);
    }
    nodes_.erase(it);
    return;
  }
}

prometheus::Counter& Metrics::httpRequests(std::string_view route, int code,
                                           std::string_view protocol) {
  // Family::Add returns the existing series for known labels, so this is a lookup after the first.
  return http_requests_total.Add({{"protocol", std::string(protocol)},
                                  {"route", std::string(route)},
                                  {"code", std::to_string(code)}});
}

prometheus::Histogram& Metrics::httpLatency(std::string_view route, std::string_view protocol) {
  return http_request_seconds.Add(
      {{"protocol", std::string(protocol)}, {"route", std::string(route)}}, latencyBuckets());
}

void Metrics::updateProcessMetrics() {
  // /proc/self/stat: fields 14/15 utime/stime (ticks), 22 starttime (ticks since boot),
  // 23 vsize (bytes), 24 rss (pages). The command name (field 2) may contain spaces: skip past ')'.
  FILE* f = fopen("/proc/self/stat", "r");
  if (f != nullptr) {
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char* p = strrchr(buf, ')');
    if (p != nullptr) {
      unsigned long long utime = 0, stime = 0, starttime = 0, vsize = 0;
      long long rss = 0;
      // After ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
      // utime(14) stime cutime cstime priority nice threads itrealvalue starttime(22) vsize rss
      if (sscanf(p + 2,
                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
                 "%llu %llu %lld",
                 &utime, &stime, &starttime, &vsize, &rss) == 5) {
        const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
        const double cpu = static_cast<double>(utime + stime) / ticks;
        if (cpu > process_cpu_->Value()) process_cpu_->Increment(cpu - process_cpu_->Value());
        process_vms_->Set(static_cast<double>(vsize));
        process_rss_->Set(static_cast<double>(rss) * static_cast<double>(sysconf(_SC_PAGESIZE)));
        static const double boot = readBootTimeSeconds();
        process_start_time_->Set(boot + static_cast<double>(starttime) / ticks);
      }
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    int count = 0;
    while (readdir(d) != nullptr) ++count;
    closedir(d);
    process_open_fds_->Set(count - 3);  // ".", ".." and the DIR's own fd
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) process_max_fds_->Set(static_cast<double>(lim.rlim_cur));
}

const std::string& Metrics::renderCached(uint64_t epoch) {
  if (epoch == 0 || epoch != cached_epoch_) {
    cached_render_ = render();
    cached_epoch_ = epoch;
  }
  return cached_render_;
}

std::string Metrics::render() {
  for (auto& hook : scrape_hooks_) hook();
  const double internal_errors_now = static_cast<double>(internalErrorCount());
  if (internal_errors_now > internal_errors.Value()) {
    internal_errors.Increment(internal_errors_now - internal_errors.Value());
  }
  updateProcessMetrics();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace sidelock::metrics
