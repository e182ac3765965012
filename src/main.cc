// sidelock: flags, signals and wiring. The only code the tests don't link.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/dapr_api.h"
#include "api/election_api.h"
#include "api/grpc_gateway.h"
#include "api/lock_api.h"
#include "api/pod_elections.h"
#include "backend/memory_backend.h"
#include "cli/command_line.h"
#include "cli/exit_codes.h"
#include "cli/locks_command.h"
#include "cli/run_command.h"
#include "common/log.h"
#include "config/config.h"
#include "event/stream_listener.h"
#include "event/uv_handle.h"
#include "event/uv_scheduler.h"
#include "grpc/grpc_server.h"
#include "health/prober.h"
#include "http/access_policy.h"
#include "http/router.h"
#include "http/server.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"
#include "redis/cluster_backend.h"
#include "redis/redis_backend.h"
#include "redis/redlock_backend.h"
#include "redis/sentinel_backend.h"
#include "redis/tls_transport.h"

namespace sidelock {
namespace {

/// The HTTP layer's view of the listen: section (it does not include the configuration).
http::ServerOptions serverOptions(const config::ListenConfig& l) {
  http::ServerOptions o;
  o.tcp = l.tcp;
  o.unix_path = l.unix_path;
  o.unix_mode = l.unix_mode;
  o.unix_gid = l.unix_gid;
  o.max_connections = l.max_connections;
  o.max_connections_per_peer = l.max_connections_per_peer;
  o.max_stream_holds = l.max_stream_holds;
  o.max_header_bytes = l.max_header_bytes;
  o.max_body_bytes = l.max_body_bytes;
  o.max_pipelined_requests = l.max_pipelined_requests;
  o.header_timeout_ms = l.header_timeout_ms;
  o.idle_timeout_ms = l.idle_timeout_ms;
  o.write_timeout_ms = l.write_timeout_ms;
  return o;
}

grpc::GrpcServerOptions grpcOptions(const config::ListenConfig& l) {
  grpc::GrpcServerOptions o;
  o.http2.max_connections = l.max_connections;
  o.http2.max_connections_per_peer = l.max_connections_per_peer;
  o.http2.request_timeout_ms = l.header_timeout_ms;
  // Requests not yet ended may hold two full messages per connection, and 64 MiB (at least four
  // messages) over all of them.
  const auto message_bytes = static_cast<size_t>(l.grpc_limits.max_message_bytes);
  o.http2.max_request_bytes_per_connection = std::max<size_t>(2 * message_bytes, 1 << 20);
  o.http2.max_request_bytes = std::max<size_t>(4 * message_bytes, 64 << 20);
  o.http2.max_concurrent_streams = l.grpc_limits.max_concurrent_streams;
  o.http2.max_header_list_bytes = l.grpc_limits.max_header_list_bytes;
  o.http2.idle_timeout_ms = l.grpc_limits.idle_timeout_ms;
  o.http2.write_timeout_ms = l.grpc_limits.write_timeout_ms;
  o.max_message_bytes = static_cast<size_t>(l.grpc_limits.max_message_bytes);
  return o;
}

constexpr const char* kUsage =
    R"(sidelock — distributed locks for the apps beside it, over local HTTP.

Usage:
  sidelock --config FILE          run the sidecar with FILE (YAML)
  sidelock --check-config FILE    validate FILE and exit (0 ok, 2 invalid)
  sidelock run [options] NAME -- CMD ARGS...
                                  run CMD while holding lock NAME (sidelock run --help)
  sidelock run [options] --elect NAME -- CMD ARGS...
                                  run CMD only while leading election NAME
  sidelock locks [--json]         the leases and waiters of a sidecar (sidelock locks --help)
  sidelock locks --all [--prefix P] [--limit N]   held locks across the deployment
  sidelock --version              print the version
  sidelock --help                 this text

Signals: SIGTERM/SIGINT drain (stop accepting, answer waiters, release held leases, exit 0
within shutdown.grace_ms); SIGHUP reloads the bearer tokens (auth.tokens_file). Docs: README.md.
)";

/// Everything the running sidecar owns, in construction order (destroyed in reverse).
struct Sidecar {
  uv_loop_t loop{};
  std::unique_ptr<event::UvScheduler> scheduler;
  std::unique_ptr<metrics::Metrics> metrics;
  std::unique_ptr<health::Prober> health_prober;  // health-bound holds' probes
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<lock::LockService> locks;
  std::unique_ptr<api::LockApi> api;
  std::unique_ptr<api::DaprApi> dapr_api;  // dapr.enabled: Dapr's lock routes
  std::unique_ptr<api::ElectionApi> elections;
  std::unique_ptr<api::PodElections> pod_elections;  // config `elections`: campaigns for the pod
  std::unique_ptr<http::Router> router;
  // Who may use each listener (README "Access control"); the servers' handlers refer to these.
  http::TokenVerifier lock_tokens;
  http::TokenVerifier admin_tokens;
  http::ListenerPolicy tcp_policy;
  http::ListenerPolicy unix_policy;
  http::ListenerPolicy admin_policy;
  std::unique_ptr<http::HttpServer> server;
  std::unique_ptr<http::Router> admin_router;
  std::unique_ptr<http::HttpServer> admin_server;  // listen.admin: health, metrics, force release
  /// The lock listeners' guarded handler (guardHandler(tcp_policy, unix_policy, router)): the
  /// policy of each request is picked by its peer, TCP or Unix, so the gRPC listeners' calls
  /// turned into http::Requests get the rules of their HTTP twin through the same handler.
  http::Handler lock_handler;
  /// listen.grpc and listen.grpc_unix (one server, both listeners).
  /// The gRPC services (src/api/grpc_gateway.h): each call runs its route through lock_handler.
  std::unique_ptr<api::GrpcGateway> grpc_gateway;
  std::unique_ptr<grpc::GrpcServer> grpc_server;
  event::UvHandle<uv_signal_t> sigterm;
  event::UvHandle<uv_signal_t> sigint;
  event::UvHandle<uv_signal_t> sighup;  // reloads the bearer tokens
  event::ScopedTimer force_exit;
  bool stopping = false;
  int exit_code = 0;
};

std::unique_ptr<backend::Backend> makeBackend(Sidecar& s, const config::Config& cfg) {
  switch (cfg.backend.type) {
    case config::BackendType::kMemory:
      // A config meant for one dev process is easily shipped to several replicas: each would
      // grant the same lock to its own clients. Say so where every operator looks first.
      SL_LOG(kWarn, "backend.memory_not_shared",
             {"message",
              "backend.type memory keeps every lock inside this one process: sidecars and "
              "replicas do not share locks (each grants the same name to its own clients); "
              "use redis, sentinel, cluster or redlock for locks shared between processes"});
      return std::make_unique<backend::MemoryBackend>(*s.scheduler);
    case config::BackendType::kRedis:
      return std::make_unique<backend::RedisBackend>(&s.loop, *s.scheduler, cfg.backend,
                                                     cfg.locks.max_ttl_ms, *s.metrics);
    case config::BackendType::kRedlock:
      return std::make_unique<backend::RedlockBackend>(&s.loop, *s.scheduler, cfg.backend,
                                                       cfg.locks.max_ttl_ms, *s.metrics);
    case config::BackendType::kSentinel:
      return std::make_unique<backend::SentinelBackend>(&s.loop, *s.scheduler, cfg.backend,
                                                        cfg.locks.max_ttl_ms, *s.metrics);
    case config::BackendType::kCluster:
      return std::make_unique<backend::ClusterBackend>(&s.loop, *s.scheduler, cfg.backend,
                                                       cfg.locks.max_ttl_ms, *s.metrics);
  }
  return nullptr;
}

void closeEverything(Sidecar& s) {
  if (s.grpc_server) s.grpc_server->close();
  s.sigterm.close();
  s.sigint.close();
  s.sighup.close();
  // Closing the last uv_signal_t for a signal restores its default action, so a second SIGTERM
  // (an impatient supervisor, a test's stop) or a SIGHUP (a token reload) arriving while the
  // process returns from main would kill it (143, 129) after a clean drain. We are exiting
  // already: ignore them (SIGKILL still ends a process that would not). A signal in the few
  // instructions between a close and its signal() still acts as the default would.
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  s.force_exit.reset();
  // Leases left in the table (release_held: false, a failed release) keep their health watches:
  // their probes' sockets must not keep the loop running.
  if (s.health_prober) s.health_prober->shutdown();
  s.scheduler->close();
}

/// How long the streams' last events may take to leave after the lock service shut down. Well
/// inside the hard deadline's second past shutdown.grace_ms; a client that reads nothing for
/// that long loses them.
constexpr int64_t kOutputDrainMs = 500;

/// After the lock service and the HTTP output drained: the backend, then the HTTP servers, then
/// the loop's own handles.
void shutDownBackendAndServers(Sidecar& s) {
  s.backend->shutdown([&s] {
    s.server->close([&s] {
      auto finish = [&s] {
        SL_LOG(kInfo, "shutdown.done");
        closeEverything(s);
      };
      if (s.admin_server)
        s.admin_server->close(finish);
      else
        finish();
    });
  });
}

/// SIGTERM/SIGINT: stop accepting, answer waiters, let campaign leaders step down, drain the lock
/// service (releases leases),
/// let the HTTP output drain (streams' last events), close the backend, then the HTTP server,
/// then the loop's own handles.
void beginShutdown(Sidecar& s, const config::Config& cfg, const char* why) {
  if (s.stopping) return;
  s.stopping = true;
  SL_LOG(kInfo, "shutdown.begin", {"signal", why}, {"grace_ms", cfg.shutdown.grace_ms});
  // Configured elections' leaders resign before anything drains: the next candidate is elected
  // at once (they have no client process to stop first).
  s.pod_elections->resignAll();
  s.api->setDraining(true);
  // Waiters are answered 503 shutting_down now, not after the step-downs below: they hold
  // nothing, and their clients can retry on another sidecar at once.
  s.locks->cancelWaiters();
  s.server->stopAccepting();
  if (s.grpc_server) s.grpc_server->stopAccepting();  // GOAWAY: calls in progress go on
  if (s.grpc_gateway) s.grpc_gateway->onDraining();   // Health/Watch: NOT_SERVING now
  // The admin listener stays up while draining so probes see /readyz turn 503.
  // Hard deadline: whatever is still open at grace + 1 s is abandoned and the process exits
  // non-zero, so a stuck Redis cannot hold a pod in Terminating forever.
  s.force_exit.start(*s.scheduler, cfg.shutdown.grace_ms + 1000, [] {
    SL_LOG(kError, "shutdown.forced", {"reason", "grace period exceeded"});
    fflush(stderr);
    _exit(1);
  });
  // Leaders elected through a campaign stream step down, and so do stream holds: their client
  // (sidelock run, --elect) stops its process while the lease is still renewed, and resigns or
  // releases by closing the stream, or is resigned / released after half the grace. Only when
  // both are done may the lock service release leases (shutdown.release_held would otherwise
  // release them under a client still running). The rest of the grace is the lock service's.
  const int64_t grace_ms = cfg.shutdown.grace_ms;
  const bool release_held = cfg.shutdown.release_held;
  const auto started = std::chrono::steady_clock::now();
  auto steps_left = std::make_shared<int>(2);
  auto stepped_down = [&s, grace_ms, release_held, started, steps_left] {
    if (--*steps_left > 0) return;
    const int64_t spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
    s.locks->shutdown(release_held, std::max<int64_t>(1, grace_ms - spent), [&s] {
      // The streams' last events ("released") and body ends are written by now, not yet sent:
      // let the kernel take them before the connections close, or clients see a bare EOF.
      s.server->drainOutput(kOutputDrainMs, [&s](size_t unwritten) {
        if (unwritten > 0) {
          SL_LOG(kWarn, "shutdown.output_not_drained",
                 {"connections", static_cast<unsigned long>(unwritten)},
                 {"waited_ms", static_cast<long long>(kOutputDrainMs)});
        }
        shutDownBackendAndServers(s);
      });
    });
  };
  s.elections->setDraining(true, grace_ms / 2, stepped_down);
  s.api->stepDownStreamHolds(grace_ms / 2, release_held, stepped_down);
}

/// The listeners' access policies from the config (tokens as loaded by loadConfig).
void setUpAccessPolicies(Sidecar& s, const config::Config& cfg) {
  s.lock_tokens.replace(cfg.auth.token_entries);
  s.admin_tokens.replace(cfg.auth.admin_token_entries);
  s.tcp_policy.allowed_origins = cfg.listen.allowed_origins;
  s.tcp_policy.allowed_hosts = cfg.listen.allowed_hosts;
  if (cfg.auth.tokens.configured()) s.tcp_policy.tokens = &s.lock_tokens;
  if (cfg.dapr.enabled) {
    // Dapr's own health probes are token-free too (Dapr's API token auth leaves them out).
    s.tcp_policy.token_free_paths.push_back("/v1.0/healthz");
    s.tcp_policy.token_free_paths.push_back("/v1.0/healthz/outbound");
  }
  s.unix_policy = s.tcp_policy;
  // Optional on the socket: a token that is sent is still checked and its prefixes apply.
  s.unix_policy.token_required = cfg.auth.unix_requires_token;
  s.unix_policy.allowed_uids = cfg.listen.unix_allowed_uids;
  // Probes and Prometheus reach the admin listener by pod IP: no browser checks there.
  s.admin_policy.browser_checks = false;
  // Probes send no token.
  s.admin_policy.token_free_paths.push_back(api::ElectionApi::kReadyPattern);
  if (cfg.auth.admin_tokens.configured()) s.admin_policy.tokens = &s.admin_tokens;
}

/// SIGHUP: re-reads both token sets. A set that fails to load keeps the previous one; either way
/// the log says so (counts and key/line only, never a token).
void reloadTokens(Sidecar& s, const config::Config& cfg) {
  struct Set {
    const config::TokenSource& source;
    http::TokenVerifier& verifier;
  };
  for (const Set& set :
       {Set{cfg.auth.tokens, s.lock_tokens}, Set{cfg.auth.admin_tokens, s.admin_tokens}}) {
    if (!set.source.configured()) continue;
    auto loaded = config::loadTokens(set.source);
    if (!loaded.isOk()) {
      SL_LOG(kError, "auth.tokens_reload_failed", {"key", set.source.key},
             {"error", loaded.status().message()},
             {"kept_tokens", static_cast<int>(set.verifier.size())});
      continue;
    }
    set.verifier.replace(*loaded);
    SL_LOG(kInfo, "auth.tokens_reloaded", {"key", set.source.key},
           {"tokens", static_cast<int>(set.verifier.size())});
  }
}

/// Every client connection (and every stream hold) is a file descriptor: the soft limit, often
/// 1,024, would cap the sidecar below listen.max_connections + listen.max_stream_holds. Raise it
/// to the hard limit, which needs no privilege, and log what we got.
void raiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  SL_LOG(kInfo, "sidelock.open_files_limit",
         {"soft", static_cast<unsigned long long>(lim.rlim_cur)},
         {"hard", static_cast<unsigned long long>(lim.rlim_max)});
}

int runSidecar(const config::Config& cfg) {
  configureLogging(cfg.log.level, cfg.log.format);
  raiseFileLimit();
  signal(SIGPIPE, SIG_IGN);

  Sidecar s;
  if (uv_loop_init(&s.loop) != 0) {
    fprintf(stderr, "sidelock: cannot initialise the event loop\n");
    return 1;
  }
  s.scheduler = std::make_unique<event::UvScheduler>(&s.loop);
  s.metrics = std::make_unique<metrics::Metrics>(SIDELOCK_VERSION);
  s.metrics->setHolderTopN(static_cast<size_t>(cfg.metrics.holder_top_n));
  s.backend = makeBackend(s, cfg);
  s.locks = std::make_unique<lock::LockService>(cfg.locks, *s.backend, *s.scheduler, *s.metrics);
  s.api = std::make_unique<api::LockApi>(cfg.locks, *s.locks, *s.metrics, *s.scheduler);
  s.health_prober = std::make_unique<health::Prober>(&s.loop, *s.scheduler, *s.metrics, cfg.health);
  s.api->setHealthProber(s.health_prober.get());
  s.api->setIdentity(cfg.identity);
  s.dapr_api = std::make_unique<api::DaprApi>(
      cfg.dapr, cfg.locks, *s.locks, [api = s.api.get()] { return api->notReadyReason(); });
  s.dapr_api->setIdentity(cfg.identity);
  s.elections = std::make_unique<api::ElectionApi>(
      cfg.locks, *s.locks, *s.api, *s.metrics, *s.scheduler,
      api::ElectionApi::Options{.identity = cfg.identity,
                                .observe_reread_ms = 1000,
                                .health_prober = s.health_prober.get()});
  s.pod_elections = std::make_unique<api::PodElections>(cfg.elections, cfg.identity, *s.locks,
                                                        s.elections->observers(), *s.scheduler,
                                                        *s.metrics, s.health_prober.get());
  s.router = std::make_unique<http::Router>();
  std::vector<api::Route> lock_routes = s.api->routes();
  for (auto& route : s.dapr_api->routes()) lock_routes.push_back(std::move(route));
  for (auto& route : s.elections->routes()) lock_routes.push_back(std::move(route));
  for (auto& route : lock_routes) {
    Status added = s.router->add(route.method, route.pattern, std::move(route.handler));
    if (!added.isOk()) {  // a programming error in the route table, caught by every test run
      fprintf(stderr, "sidelock: bad route %s: %s\n", route.pattern.c_str(),
              added.toString().c_str());
      return 1;
    }
  }
  setUpAccessPolicies(s, cfg);
  s.lock_handler = http::guardHandler(s.tcp_policy, s.unix_policy, s.router->asHandler());
  s.server = std::make_unique<http::HttpServer>(&s.loop, *s.scheduler, serverOptions(cfg.listen),
                                                *s.metrics, s.lock_handler);
  Status listening = s.server->start();
  if (listening.isOk() && (!cfg.listen.grpc.empty() || !cfg.listen.grpc_unix.empty())) {
    s.grpc_gateway = std::make_unique<api::GrpcGateway>(
        *s.scheduler, s.metrics.get(), s.lock_handler,
        api::GrpcGateway::Options{.router = s.router.get(), .max_wait_ms = cfg.locks.max_wait_ms});
    grpc::GrpcServerOptions grpc_options = grpcOptions(cfg.listen);
    grpc_options.on_refused = s.grpc_gateway->refusalCounter();
    s.grpc_server = std::make_unique<grpc::GrpcServer>(&s.loop, *s.scheduler, grpc_options,
                                                       s.grpc_gateway->asHandler());
    // Scrapes are served on the loop, which has stopped by the time grpc_server goes.
    s.metrics->addScrapeHook([&s] {
      s.metrics->grpc_connections.Set(
          s.grpc_server ? static_cast<double>(s.grpc_server->connectionCount()) : 0);
      s.metrics->grpc_calls.Set(s.grpc_server ? static_cast<double>(s.grpc_server->callCount())
                                              : 0);
    });
    if (!cfg.listen.grpc.empty()) listening = s.grpc_server->listenTcp(cfg.listen.grpc);
    if (listening.isOk() && !cfg.listen.grpc_unix.empty()) {
      listening = s.grpc_server->listenUnix(cfg.listen.grpc_unix, cfg.listen.unix_mode,
                                            cfg.listen.unix_gid);
    }
  }
  if (listening.isOk() && !cfg.listen.admin.empty()) {
    s.admin_router = std::make_unique<http::Router>();
    for (auto& route : s.api->routes()) {
      if (route.pattern.rfind("/v1/", 0) == 0) continue;  // no lock routes on the admin port
      (void)s.admin_router->add(route.method, route.pattern, std::move(route.handler));
    }
    for (auto& route : s.api->adminRoutes()) {  // operator routes: on the admin port only
      (void)s.admin_router->add(route.method, route.pattern, std::move(route.handler));
    }
    // The one lock-API route a kubelet needs: the app container's leader-only readiness probe
    // (helm: sidelock.electionReadinessProbe) reaches the sidecar by pod IP, on this port.
    for (auto& route : s.elections->routes()) {
      if (route.method == "GET" && route.pattern == api::ElectionApi::kReadyPattern) {
        (void)s.admin_router->add(route.method, route.pattern, std::move(route.handler));
      }
    }
    config::ListenConfig admin_listen = cfg.listen;
    admin_listen.tcp = cfg.listen.admin;
    admin_listen.unix_path.clear();
    s.admin_server = std::make_unique<http::HttpServer>(
        &s.loop, *s.scheduler, serverOptions(admin_listen), *s.metrics,
        http::guardHandler(s.admin_policy, s.admin_policy, s.admin_router->asHandler()));
    listening = s.admin_server->start();
    if (!listening.isOk()) s.server->close([] {});
  }
  if (!listening.isOk()) {
    SL_LOG(kError, "listen.failed", {"error", listening.toString()});
    fprintf(stderr, "sidelock: %s\n", listening.toString().c_str());
    s.exit_code = 1;
    s.server->close([] {});
    if (s.admin_server) s.admin_server->close([] {});
    if (s.grpc_server) s.grpc_server->close();
    s.backend->shutdown([&s] { closeEverything(s); });
  } else {
    s.backend->start();
    s.pod_elections->start();
    auto on_signal = [](uv_signal_t* h, int signum) {
      if (h->data == nullptr) return;
      auto* pair = static_cast<std::pair<Sidecar*, const config::Config*>*>(h->data);
      beginShutdown(*pair->first, *pair->second, signum == SIGTERM ? "SIGTERM" : "SIGINT");
    };
    static std::pair<Sidecar*, const config::Config*> signal_ctx;
    signal_ctx = {&s, &cfg};
    uv_signal_init(&s.loop, s.sigterm.allocate(&signal_ctx));
    uv_signal_start(s.sigterm.get(), on_signal, SIGTERM);
    uv_signal_init(&s.loop, s.sigint.allocate(&signal_ctx));
    uv_signal_start(s.sigint.get(), on_signal, SIGINT);
    uv_signal_init(&s.loop, s.sighup.allocate(&signal_ctx));
    uv_signal_start(
        s.sighup.get(),
        [](uv_signal_t* h, int) {
          if (h->data == nullptr) return;
          auto* pair = static_cast<std::pair<Sidecar*, const config::Config*>*>(h->data);
          reloadTokens(*pair->first, *pair->second);
        },
        SIGHUP);
    SL_LOG(kInfo, "sidelock.started", {"version", SIDELOCK_VERSION}, {"tcp", cfg.listen.tcp},
           {"unix", cfg.listen.unix_path},
           {"grpc", cfg.listen.grpc}, {"grpc_unix", cfg.listen.grpc_unix},
           {"backend_nodes", static_cast<int>(cfg.backend.nodes.size())});
  }

  uv_run(&s.loop, UV_RUN_DEFAULT);
  // Objects that own handles go first, then the loop drains their close callbacks.
  s.admin_server.reset();
  s.grpc_server.reset();
  s.grpc_gateway.reset();  // after its server: no call reaches it any more
  s.server.reset();
  s.pod_elections.reset();
  s.elections.reset();
  s.api.reset();
  s.locks.reset();
  s.health_prober.reset();  // after the leases whose watches it runs
  s.backend.reset();
  s.scheduler.reset();
  uv_run(&s.loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&s.loop);
  if (rc != 0) {
    SL_LOG(kError, "shutdown.loop_not_closed", {"error", uv_strerror(rc)});
    return 1;
  }
  return s.exit_code;
}

}  // namespace
}  // namespace sidelock

int main(int argc, char** argv) {
  using namespace sidelock;
  auto line = cli::parseCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!line.isOk()) {
    fprintf(stderr, "sidelock: %s\n\n%s", line.status().message().c_str(), kUsage);
    return cli::kExitUsage;
  }
  switch (line->command) {
    case cli::Command::kRun:
      return cli::runCommand(argc - 1, argv + 1);
    case cli::Command::kLocks:
      return cli::locksCommand(argc - 1, argv + 1);
    case cli::Command::kVersion:
      printf("sidelock %s\n", SIDELOCK_VERSION);
      return 0;
    case cli::Command::kHelp:
      fputs(kUsage, stdout);
      return 0;
    case cli::Command::kServe:
    case cli::Command::kCheckConfig:
      break;
  }
  const char* path = line->config_path.c_str();
  auto cfg = config::loadConfigFromFile(path);
  if (!cfg.isOk()) {
    fprintf(stderr, "sidelock: invalid config: %s\n", cfg.status().message().c_str());
    return 2;
  }
  // TLS material is loaded here once, so a bad certificate or key stops start-up (and
  // --check-config) instead of leaving every node down.
  if (cfg->backend.tls.enabled && cfg->backend.type != config::BackendType::kMemory) {
    auto tls = backend::TlsClientContext::create(cfg->backend.tls);
    if (!tls.isOk()) {
      fprintf(stderr, "sidelock: invalid config: %s\n", tls.status().message().c_str());
      return 2;
    }
  }
  if (line->command == cli::Command::kCheckConfig) {
    // The file is valid; what bind() will need of this machine is checked too (start-up
    // reports the same at bind time).
    if (!cfg->listen.unix_path.empty()) {
      const std::string problem =
          event::unixSocketDirectoryProblem(cfg->listen.unix_path, /*need_writable=*/true);
      if (!problem.empty()) {
        fprintf(stderr, "sidelock: invalid config: listen.unix %s: %s\n",
                cfg->listen.unix_path.c_str(), problem.c_str());
        return 2;
      }
    }
    printf("%s: ok\n", path);
    return 0;
  }
  return runSidecar(*cfg);
}
