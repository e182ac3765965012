// The validated configuration. Loaded from YAML (yaml-cpp) by loadConfig*(); every field has a
// default so an empty file is a valid config. Unknown keys and bad values are errors naming the
// key path ("backend.nodes[2]: ...").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/health_spec.h"
#include "common/log.h"
#include "common/status.h"
#include "config/tokens.h"

namespace sidelock::config {

struct ListenConfig {
  std::string tcp = "127.0.0.1:7411";                     // "" disables
  std::string unix_path = "/run/sidelock/sidelock.sock";  // YAML key `unix`; "" disables
  /// Optional second TCP listener serving /healthz, /readyz, /metrics, /v1/openapi.json and the
  /// operators' force release (never the lock routes), so probes, Prometheus and operators can
  /// reach the pod IP while the lock API stays on localhost. "" disables.
  std::string admin;
  uint32_t unix_mode = 0660;   // YAML `unix_mode: "0660"` (octal string)
  int max_connections = 1024;  // per listener; idle ones are evicted to admit new ones
  /// Connections one peer (uid on the Unix socket, IP on TCP) may hold on a listener; 0: no cap.
  int max_connections_per_peer = 0;
  /// Connections holding a streamed response (hold: stream), per listener, on top of
  /// max_connections.
  int max_stream_holds = 16384;
  int max_header_bytes = 16 * 1024;  // request line + headers
  int max_body_bytes = 64 * 1024;
  int max_pipelined_requests = 64;     // parsed but unanswered requests per connection
  int64_t header_timeout_ms = 10'000;  // whole request head must arrive within this
  int64_t idle_timeout_ms = 60'000;    // keep-alive connection with no request in flight
  int64_t write_timeout_ms = 30'000;   // a client that does not read its responses is dropped
  /// Group given to the Unix socket file (a name or a number); "" keeps the process's group.
  std::string unix_group;
  int64_t unix_gid = -1;  // resolved from unix_group at load time; -1 = unchanged
  /// Peer uids (SO_PEERCRED) allowed on the Unix socket; empty = anyone the file mode lets in.
  /// YAML takes numbers or user names.
  std::vector<uint32_t> unix_allowed_uids;
  /// Browser origins ("http://localhost:3000", lower-cased scheme://host[:port]) whose requests
  /// the lock listeners accept; a request with any other Origin header is refused (403).
  std::vector<std::string> allowed_origins;
  /// Host header names (lower-cased, no port) accepted on the lock listeners besides the loopback
  /// names (localhost, 127.0.0.0/8, [::1]); any other Host is refused (421). "*": any Host.
  std::vector<std::string> allowed_hosts;
  /// gRPC listeners (HTTP/2 cleartext, prior knowledge): "host:port" with the access rules of
  /// `tcp`, and a Unix socket path with those of `unix` (mode, group, allowed uids). "" disables.
  std::string grpc;
  std::string grpc_unix;
  /// Limits of the gRPC listeners (YAML `grpc_limits:`).
  struct GrpcLimits {
    int max_concurrent_streams = 100;            // per connection; more are refused
    int max_message_bytes = 4 * 1024 * 1024;     // one request message
    int max_header_list_bytes = 16 * 1024;       // one request's headers, HPACK-decoded
    int64_t idle_timeout_ms = 300'000;           // a connection with no call open
    int64_t write_timeout_ms = 30'000;           // a client that does not read is dropped
  } grpc_limits;
};

/// Bearer tokens (auth:). Keys name where tokens come from, never the tokens themselves.
struct AuthConfig {
  TokenSource tokens{"", "", "auth.tokens"};              // lock listeners
  TokenSource admin_tokens{"", "", "auth.admin_tokens"};  // listen.admin
  /// With tokens configured, TCP always requires one; the Unix socket only when this is true
  /// (its file mode, group and unix_allowed_uids already say who may connect).
  bool unix_requires_token = false;
  // Loaded at start-up from the sources above (and again on SIGHUP by main); not YAML keys.
  std::vector<TokenEntry> token_entries;
  std::vector<TokenEntry> admin_token_entries;
};

enum class BackendType { kMemory, kRedis, kRedlock, kSentinel, kCluster };

struct RedisNodeAddress {
  std::string host;  // empty for unix sockets
  int port = 0;
  std::string unix_path;         // "unix:/path" in YAML
  std::string toString() const;  // "host:port" or "unix:/path"
};

struct RedlockConfig {
  int64_t node_timeout_ms = 50;  // per-node budget for one acquire/extend/release call
  double drift_factor = 0.01;    // drift = ttl * drift_factor + 2 ms
  /// Ignore the vote of a node that restarted (run_id changed or uptime < max TTL) until
  /// locks.max_ttl_ms has passed since its restart.
  bool delayed_restart = true;
  int64_t retry_jitter_ms = 50;  // randomized backoff between competing sidecars
};

/// TLS to every Redis node (backend.tls). Certificate and host-name verification are always on
/// when enabled; there is deliberately no switch to turn them off.
struct TlsConfig {
  bool enabled = false;
  std::string ca_file;    // PEM bundle to verify servers; "" = the system store
  std::string cert_file;  // client certificate (mutual TLS), with key_file
  std::string key_file;
  std::string server_name;  // name verified and sent as SNI; "" = each node's host
};

/// backend.sentinel (type sentinel only): the master is found by asking the sentinels listed in
/// backend.nodes. TLS (backend.tls) applies to the sentinels and the master alike.
struct SentinelConfig {
  std::string master_name;  // required for type sentinel
  /// > 0: after a grant, WAIT for this many replicas to acknowledge it (bounded by
  /// backend.command_timeout_ms); a grant with fewer acks is released and answered unavailable.
  int wait_replicas = 0;
  /// Sentinel credentials, read like the node credentials (names of env vars / a file).
  std::string username_env = "SIDELOCK_SENTINEL_USERNAME";
  std::string password_env = "SIDELOCK_SENTINEL_PASSWORD";
  std::string password_file;
  // Resolved at load time from the above (not YAML keys).
  std::string username;
  std::string password;
};

struct BackendConfig {
  BackendType type = BackendType::kRedis;
  /// default: 127.0.0.1:6379; type sentinel: the sentinels; type cluster: the seed nodes
  std::vector<RedisNodeAddress> nodes;
  std::string key_prefix = "sidelock:";
  int db = 0;
  /// Credentials never live in the YAML itself: names of env vars / files that hold them.
  std::string username_env = "SIDELOCK_REDIS_USERNAME";
  std::string password_env = "SIDELOCK_REDIS_PASSWORD";
  std::string password_file;  // read at start-up if set; wins over password_env
  // Resolved at load time from the above (not YAML keys).
  std::string username;
  std::string password;

  int64_t connect_timeout_ms = 1000;
  int64_t command_timeout_ms = 500;  // single redis: a link silent this long is broken
  int64_t reconnect_min_ms = 100;
  int64_t reconnect_max_ms = 5000;
  int64_t health_interval_ms = 1000;  // PING (and Redlock INFO) period
  TlsConfig tls;
  RedlockConfig redlock;
  SentinelConfig sentinel;
};

struct LocksConfig {
  int64_t default_ttl_ms = 30'000;
  int64_t max_ttl_ms = 600'000;
  int64_t max_wait_ms = 300'000;
  /// The largest lock_delay_ms an acquire may ask (Consul's LockDelay; 0 turns the field off).
  int64_t max_lock_delay_ms = 60'000;
  int max_name_bytes = 200;
  int max_owner_bytes = 128;
  int max_waiters_per_lock = 1024;
  int max_waiters = 65'536;
  int max_event_streams = 16'384;  // open GET /v1/locks/{name}/events streams
  int64_t retry_min_ms = 2;    // waiter backoff start
  int64_t retry_max_ms = 500;  // waiter backoff cap (also capped by the holder's PTTL)
  /// Watchdog: renew every ttl * renew_fraction.
  double renew_fraction = 1.0 / 3.0;
  /// Default cap on auto-renewed holds (0 = no default cap; requests may still set max_hold_ms).
  int64_t default_max_hold_ms = 3'600'000;
  int64_t max_hold_ms_limit = 86'400'000;  // largest max_hold_ms a request may ask for
  /// How long an acquire's or release's answer is remembered under its request_id, and how many
  /// answers at most (README "Safe retries"). 0 turns request_id replays off.
  int64_t request_id_window_ms = 600'000;
  int max_request_ids = 100'000;
  /// ... and how many bytes at most (the oldest answers go first): a count alone is no bound, as
  /// one answer costs up to ~1.5 KiB with the longest names, owners and request ids. 16 MiB fits
  /// beside 100k leases and 10k waiters (~100 MiB) under the chart's 128 MiB memory limit.
  int64_t max_request_id_bytes = 16 << 20;
  /// Extra random spread added to every waiter retry, so sidecars that split a Redlock vote do
  /// not retry in lockstep. Resolved at load time from backend.redlock.retry_jitter_ms when the
  /// backend is redlock, else 0 (not a YAML key under locks).
  int64_t retry_jitter_ms = 0;
};

/// What /metrics exports beyond the fixed series (README "Metrics").
struct MetricsConfig {
  /// sidelock_held_locks_by_holder: the holders with the most leases that get a series of their
  /// own (the rest are summed in holder="other"); 0 = only holder="other". At most 100.
  int holder_top_n = 10;
};

struct ShutdownConfig {
  int64_t grace_ms = 10'000;
  bool release_held = true;  // release leases this sidecar granted that are still held
};

struct LogConfig {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kLogfmt;
};

/// Dapr's lock API (`/v1.0-alpha1/lock/{store}`, `/unlock/{store}`), README "Dapr compatibility".
struct DaprConfig {
  bool enabled = true;
  /// Store names accepted in the route; ["*"] = any (an app's component name keeps working).
  std::vector<std::string> stores = {"*"};
  /// The secret that turns a Dapr lockOwner into a sidecar owner id (HMAC-SHA256). From the
  /// environment variable or the file (the file wins); neither set: a random secret per process,
  /// so a lock taken before a restart can only expire, not be unlocked.
  std::string owner_secret_env = "SIDELOCK_DAPR_OWNER_SECRET";
  std::string owner_secret_file;
  std::string owner_secret;  // resolved at load; not a YAML key
  /// The app id GET /v1.0/metadata answers (`id`): Dapr's app id, one per application, the same
  /// on every replica. 1..63 letters, digits, '-' and '_' (Dapr refuses '.' in app ids).
  std::string app_id = "sidelock";
};

/// One election the sidecar campaigns in for its pod from start-up (`elections:`, README
/// "Elections the sidecar runs for its pod").
struct ElectionConfig {
  std::string name;   // a lock name (common/names.h); no two alike
  std::string value;  // the leader's value, `${VAR}` expanded from the environment at load
  int64_t ttl_ms = 0;  // 1..locks.max_ttl_ms; locks.default_ttl_ms when not given
  /// The app's health endpoint (README "Holds that follow the app's health"): probed from
  /// start-up; after `failures` failures in a row this sidecar resigns (or leaves the line), and
  /// campaigns again after the next probe that succeeds. Absent: the pod campaigns regardless.
  std::optional<HealthSpec> health;
};

struct Config {
  /// Whom this sidecar speaks for in elections (its pod): the candidate of `elections` and of
  /// GET /v1/elections/{name}/ready without `candidate`. Default: $POD_NAME, else the host name.
  std::string identity;
  std::vector<ElectionConfig> elections;
  /// Limits on the probes of health-bound holds (`health:`), from every source: acquires,
  /// campaigns and `elections[].health`.
  HealthLimits health;
  ListenConfig listen;
  BackendConfig backend;
  LocksConfig locks;
  ShutdownConfig shutdown;
  LogConfig log;
  MetricsConfig metrics;
  AuthConfig auth;
  DaprConfig dapr;
};

/// Parses and validates YAML text. Credentials are resolved from the environment / files.
StatusOr<Config> loadConfigFromString(const std::string& yaml_text);
StatusOr<Config> loadConfigFromFile(const std::string& path);

}  // namespace sidelock::config
