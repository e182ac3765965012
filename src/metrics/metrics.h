// Every metric family sidelock exports, declared in one place (src/README.md, rule 11). Layers
// receive a Metrics& and bump the pre-resolved series; /metrics is rendered from the
// prometheus-cpp registry by our own HTTP loop (no civetweb exposer).
//
// Label rules: no lock names and no owner ids as label values, ever. `node` is bounded by config,
// `route` by the router's fixed route table, `result`/`op`/`kind` by the enums used here.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sidelock::metrics {

/// Per-node series of one backend node (Redis master), resolved once at start-up.
struct NodeMetrics {
  prometheus::Gauge* up = nullptr;
  prometheus::Counter* reconnects = nullptr;
  // errors by kind
  prometheus::Counter* errors_timeout = nullptr;
  prometheus::Counter* errors_disconnected = nullptr;
  prometheus::Counter* errors_reply = nullptr;  // Redis answered with an error
  prometheus::Counter* noscript_reloads = nullptr;
  // latency by op
  prometheus::Histogram* latency_acquire = nullptr;
  prometheus::Histogram* latency_release = nullptr;
  prometheus::Histogram* latency_extend = nullptr;
  prometheus::Histogram* latency_inspect = nullptr;
  prometheus::Histogram* latency_other = nullptr;  // PING, INFO, SCRIPT LOAD
};

class Metrics {
  // Declared first: every family reference below is registered in it during construction.
  std::shared_ptr<prometheus::Registry> registry_;

 public:
  explicit Metrics(std::string version = "dev");
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  prometheus::Registry& registry() { return *registry_; }

  /// Series for one backend node; call once per node at start-up (idempotent for the same name).
  NodeMetrics& node(std::string_view address);
  /// The same without the backend_up series (up == nullptr), for a node whose address changes at
  /// run time (the Sentinel master): its owner keeps backend_up{node=<current address>} itself.
  /// `label` stays fixed, so rates over the node's errors and latency survive a failover.
  NodeMetrics& nodeWithoutUpGauge(std::string_view label);
  /// Removes every series of a node that left the topology (a Cluster master replaced by its
  /// replica), so `sidelock_backend_up{node}` does not report it down forever. Call only once
  /// nothing holds its NodeMetrics any more.
  void forgetNode(std::string_view address);

  /// How many holders get a series of their own in sidelock_held_locks_by_holder (config
  /// metrics.holder_top_n; 0: only holder="other").
  void setHolderTopN(size_t n) { holder_top_n_ = n; }
  /// One holder label's lease count (the label is a view: valid during the call).
  struct HolderLeases {
    std::string_view holder;
    int64_t leases = 0;
  };
  /// The label of the series that sums every holder outside the top.
  static constexpr std::string_view kOtherHolders = "other";
  /// Sets sidelock_held_locks_by_holder: the holder_top_n holders with the most leases (ties: by
  /// label) their own series, the rest and `unlabelled` in holder="other" (a holder labelled
  /// "other" adds to it); the series of a holder that left the top or holds nothing are removed.
  /// About holders x log(top_n) steps; called at scrape time, never on a grant or release.
  void publishHeldByHolder(std::vector<HolderLeases> counts, int64_t unlabelled);

  /// Hooks run just before each scrape, to compute gauges from live state.
  void addScrapeHook(std::function<void()> hook) { scrape_hooks_.push_back(std::move(hook)); }

  /// Prometheus text exposition format 0.0.4 of everything registered.
  std::string render();
  /// render(), reused for every call with the same `epoch` (the event loop's turn): a flood of
  /// pipelined scrapes costs one render per loop turn, not one per request, and every answer is
  /// as fresh as a render of its own would be (nothing else runs between them). Epoch 0 always
  /// renders.
  const std::string& renderCached(uint64_t epoch);

  // --- acquire ---
  prometheus::Family<prometheus::Counter>& acquire_total;            // {kind,result}
  prometheus::Family<prometheus::Counter>& acquire_contended_total;  // {kind}
  prometheus::Family<prometheus::Histogram>& acquire_wait_seconds;   // {kind}
  /// One lock kind's acquire series ({kind="mutex"}, {kind="semaphore"}).
  struct AcquireMetrics {
    prometheus::Counter& acquired;
    prometheus::Counter& busy;
    prometheus::Counter& error;
    prometheus::Counter& limit_mismatch;  // semaphores: asked with another limit
    prometheus::Counter& too_many_waiters;
    prometheus::Counter& cancelled;  // the client went away while waiting
    prometheus::Counter& contended;  // found the lock held at least once
    prometheus::Histogram& wait_seconds;
  };
  /// The series of lock kind `kind`, created on first use ("mutex" exists from the start, so
  /// its rates read 0 rather than absent before the first request); the reference stays valid.
  AcquireMetrics& acquireFor(std::string_view kind);
  prometheus::Counter& grants_undelivered;  // granted, never read by the client, given back
  prometheus::Counter& forced_releases;     // leases an operator freed (admin force release)
  /// Acquires that went out and got no answer (timeout, link lost), so may have been granted, by
  /// what became of that possible grant ({outcome}): given back and found (released) or not
  /// there (not_granted), never reached in its TTL (gave_up), or left to the caller, whose own
  /// owner id it carries (left_to_owner).
  prometheus::Family<prometheus::Counter>& unanswered_acquires_total;  // {outcome}
  prometheus::Counter& unanswered_released;
  prometheus::Counter& unanswered_not_granted;
  prometheus::Counter& unanswered_gave_up;
  prometheus::Counter& unanswered_left_to_owner;
  /// Sentinel grants given back because fewer than wait_replicas replicas acknowledged them (or
  /// their WAIT took their validity), by what became of the give-back ({outcome}): its release
  /// freed the grant (released) or found it gone (not_held), or it was never run (gave_up: the
  /// grant's TTL ended first, shutdown, a release that cannot be limited to its token refused
  /// once; dropped: too many waiting for the master).
  prometheus::Family<prometheus::Counter>& unreplicated_grants_total;  // {outcome}
  prometheus::Counter& unreplicated_released;
  prometheus::Counter& unreplicated_not_held;
  prometheus::Counter& unreplicated_gave_up;
  prometheus::Counter& unreplicated_dropped;
  prometheus::Gauge& waiters;
  /// Bytes held by answers remembered for request_id retries (bounded by
  /// locks.max_request_id_bytes); set at scrape time.
  prometheus::Gauge& request_id_bytes;

  // --- leases ---
  prometheus::Gauge& held_locks;
  /// Seconds since the oldest held lease was granted (0 with none), computed at scrape time: a
  /// lock stuck with a holder that never releases shows as a steadily rising line.
  prometheus::Gauge& oldest_lease_age;
  /// {holder}: leases held through this sidecar by their public holder label (an election's: its
  /// candidate), never an owner id. Bounded: the holder_top_n holders with the most leases have a
  /// series each, every other lease (and one without a label) counts in holder="other" (always
  /// present); set at scrape time by publishHeldByHolder().
  prometheus::Family<prometheus::Gauge>& held_locks_by_holder;
  prometheus::Histogram& hold_seconds;  // grant -> release / expiry / loss
  prometheus::Counter& lease_expired;   // TTL ran out before release
  prometheus::Counter& lease_lost;      // renewal / extend found the lease gone or stolen

  prometheus::Family<prometheus::Counter>& release_total;  // {result}
  prometheus::Counter& release_released;
  prometheus::Counter& release_not_owner;
  prometheus::Counter& release_not_held;
  prometheus::Counter& release_lease_lost;
  prometheus::Counter& release_error;

  prometheus::Family<prometheus::Counter>& extend_total;  // {result}
  prometheus::Counter& extend_extended;
  prometheus::Counter& extend_not_owner;
  prometheus::Counter& extend_not_held;
  prometheus::Counter& extend_lease_lost;
  prometheus::Counter& extend_error;

  prometheus::Family<prometheus::Counter>& renew_total;  // {result} watchdog renewals
  prometheus::Counter& renew_renewed;
  prometheus::Counter& renew_lost;
  prometheus::Counter& renew_error;   // transient backend error, retried
  prometheus::Counter& renew_capped;  // stopped at max_hold_ms

  prometheus::Counter& wakeups;  // pub/sub release notifications that woke a waiter
  prometheus::Counter& lock_delay_refusals;  // acquires answered 409 because a lock-delay ran
  // Lock-delays started by a lease of this sidecar that ended unreleased, or by a force release
  // through it: {cause} = expired | forced | unhealthy (pre-created, a fixed set).
  prometheus::Family<prometheus::Counter>& lock_delays_applied;
  prometheus::Counter& lock_delays_expired;
  prometheus::Counter& lock_delays_forced;
  prometheus::Counter& lock_delays_unhealthy;

  // --- elections (README "Leader election") ---
  prometheus::Counter& elections_won;  // campaigns of this sidecar elected
  /// {reason}: "lost" (the lease was found gone or another's: renewals failed, a pause, an
  /// outage longer than the TTL), "client_gone" (the campaign's client hung up while leading:
  /// counted as a resignation too).
  prometheus::Family<prometheus::Counter>& election_leadership_lost_total;
  prometheus::Counter& election_lost;
  prometheus::Counter& election_resignations;  // leaders that resigned (route, hang-up, shutdown)
  prometheus::Gauge& election_observers;       // open observe streams
  // --- lock event streams (README "Lock events") ---
  prometheus::Gauge& lock_event_streams;  // open GET /v1/locks/{name}/events streams
  /// {type}: state, acquired, released, expired, forced, extended (lines written, per stream).
  prometheus::Family<prometheus::Counter>& lock_events_sent_total;
  /// {election}: only the names of the configured `elections` (bounded by config, never a name a
  /// client sent). 1 while this sidecar's identity leads, else 0.
  prometheus::Family<prometheus::Gauge>& election_leader;
  /// {election}: seconds since this sidecar last knew of a leader (any candidate's) of the name,
  /// 0 while it knows one; set at scrape time.
  prometheus::Family<prometheus::Gauge>& election_leaderless_seconds;
  /// {election}: the configured TTL, so an alert compares leaderless time with it.
  prometheus::Family<prometheus::Gauge>& election_ttl_seconds;
  /// The series of one configured election.
  struct ElectionSeries {
    prometheus::Gauge& leader;
    prometheus::Gauge& leaderless_seconds;
    prometheus::Gauge& ttl_seconds;
  };
  /// The series of configured election `name` (created at the first call).
  ElectionSeries electionSeries(std::string_view name);

  // --- health-bound holds (README "Holds that follow the app's health") ---
  /// {result}: ok (2xx), failed (another status, a bad or oversized answer, a reset), timeout,
  /// refused (the connect failed).
  prometheus::Family<prometheus::Counter>& health_probes_total;
  prometheus::Counter& health_probe_ok;
  prometheus::Counter& health_probe_failed;
  prometheus::Counter& health_probe_timeout;
  prometheus::Counter& health_probe_refused;
  /// Distinct health endpoints probed now (holds naming the same URL and interval share one).
  prometheus::Gauge& health_probes_active;
  /// Leases this sidecar released because their health endpoint failed.
  prometheus::Counter& leases_released_unhealthy;

  // --- backend ---
  prometheus::Family<prometheus::Gauge>& backend_up;                   // {node}
  prometheus::Family<prometheus::Histogram>& backend_request_seconds;  // {node,op}
  prometheus::Family<prometheus::Counter>& backend_errors_total;       // {node,kind}
  prometheus::Family<prometheus::Counter>& backend_reconnects_total;   // {node}
  prometheus::Gauge& backend_ready;
  /// {reason}: sentinel switch_master / readonly / reresolve, cluster moved / slots_refresh.
  prometheus::Family<prometheus::Counter>& backend_topology_changes_total;
  /// {kind}: moved / ask (Redis Cluster redirections followed).
  prometheus::Family<prometheus::Counter>& backend_cluster_redirects_total;
  prometheus::Counter& redlock_quorum_failures;
  /// {outcome}: settled / gave_up. Reads of a lease whose holding nodes named different tokens
  /// (a token sync on its way), read again until they agreed or the budget ran out.
  prometheus::Family<prometheus::Counter>& redlock_unsettled_reads_total;
  prometheus::Counter& redlock_reads_settled;
  prometheus::Counter& redlock_reads_gave_up;
  prometheus::Histogram& redlock_validity_seconds;  // validity remaining at grant

  // --- http ---
  prometheus::Family<prometheus::Counter>& http_requests_total;     // {protocol,route,code}
  prometheus::Family<prometheus::Histogram>& http_request_seconds;  // {protocol,route}
  prometheus::Gauge& http_in_flight;
  prometheus::Gauge& http_connections;
  prometheus::Gauge& grpc_connections;             // set at scrape time (main.cc)
  prometheus::Gauge& grpc_calls;                   // set at scrape time (main.cc)
  prometheus::Counter& http_connections_rejected;  // over max_connections
  prometheus::Counter& http_connections_evicted;   // idle ones closed to admit a new client
  prometheus::Gauge& http_stream_holds;            // connections counted as stream holds
  prometheus::Counter& http_slow_streams_closed;   // readers too far behind their stream

  // --- health of sidelock itself ---
  /// "Cannot happen" checks that failed (SL_INVARIANT, src/common/invariant.h); copied from
  /// internalErrorCount() at scrape time. Anything above 0 is a bug to report.
  prometheus::Counter& internal_errors;

  /// `protocol`: "http" (HttpServer) or "grpc" (the gRPC gateway, src/api/grpc_gateway.h, which
  /// counts each call under the route it ran and the route's HTTP status).
  prometheus::Counter& httpRequests(std::string_view route, int code,
                                    std::string_view protocol = "http");
  prometheus::Histogram& httpLatency(std::string_view route, std::string_view protocol = "http");

 private:
  NodeMetrics& makeNode(std::string_view label, bool with_up_gauge);
  std::vector<std::function<void()>> scrape_hooks_;
  std::string cached_render_;
  uint64_t cached_epoch_ = 0;
  std::vector<std::pair<std::string, std::unique_ptr<NodeMetrics>>> nodes_;
  std::vector<std::pair<std::string, std::unique_ptr<AcquireMetrics>>> acquire_kinds_;
  size_t holder_top_n_ = 10;
  prometheus::Gauge* held_by_other_holders_ = nullptr;
  std::vector<std::pair<std::string, prometheus::Gauge*>> holder_series_;  // the top's, by label
  // process_* and build info (updated at scrape time)
  prometheus::Gauge* process_rss_ = nullptr;
  prometheus::Gauge* process_vms_ = nullptr;
  prometheus::Counter* process_cpu_ = nullptr;
  prometheus::Gauge* process_open_fds_ = nullptr;
  prometheus::Gauge* process_max_fds_ = nullptr;
  prometheus::Gauge* process_start_time_ = nullptr;
  void updateProcessMetrics();
};

/// Histogram buckets in seconds for lock waits and holds (1 ms .. 10 min).
const prometheus::Histogram::BucketBoundaries& waitBuckets();
/// Histogram buckets in seconds for backend and HTTP latency (50 us .. 5 s).
const prometheus::Histogram::BucketBoundaries& latencyBuckets();

}  // namespace sidelock::metrics
