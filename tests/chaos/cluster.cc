#include "chaos/cluster.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "chaos/fenced_register.h"
#include "support/child_process.h"
#include "support/http_client.h"

namespace sidelock::testing::chaos {

using nlohmann::json;

namespace {

std::string sidecarYaml(const ClusterOptions& options, const std::vector<std::string>& nodes) {
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "\"" : ", \"") + n + "\"";
  // The fixture writes `listen:` with the TCP port and socket first: indented lines placed
  // first here continue that mapping.
  std::string yaml = options.extra_listen_yaml;
  yaml +=
      "backend:\n  type: " + std::string(nodes.size() > 1 ? "redlock" : "redis") + "\n  nodes: [" +
      list + "]\n" + "  connect_timeout_ms: " + std::to_string(Timings::kConnectTimeoutMs) + "\n" +
      "  command_timeout_ms: " + std::to_string(Timings::kCommandTimeoutMs) + "\n" +
      "  reconnect_min_ms: 20\n  reconnect_max_ms: " + std::to_string(Timings::kReconnectMaxMs) +
      "\n  health_interval_ms: 100\n";
  if (nodes.size() > 1) {
    yaml += "  redlock:\n    node_timeout_ms: " + std::to_string(Timings::kNodeTimeoutMs) +
            "\n    delayed_restart: " + (options.delayed_restart ? "true" : "false") + "\n";
  }
  yaml += "locks:\n  max_ttl_ms: " + std::to_string(options.max_ttl_ms) +
          "\n  default_ttl_ms: " + std::to_string(Timings::kTtlMs) + "\n  retry_max_ms: 50\n" +
          options.extra_locks_yaml;
  yaml += "shutdown:\n  grace_ms: 2000\nlog:\n  level: error\n";
  return yaml;
}

}  // namespace

int chaosRounds() {
  const char* long_run = getenv("SIDELOCK_CHAOS_LONG");
  return long_run != nullptr && std::string(long_run) == "1" ? 5 : 1;
}

Cluster::Cluster(ClusterOptions options) : options_(std::move(options)) {
  std::vector<std::string> addresses;
  for (int i = 0; i < options_.backend_nodes; ++i) {
    RedisServer::Launch launch;
    if (options_.node_setup) options_.node_setup(i, launch);
    nodes_.push_back(std::make_unique<RedisServer>(
        RedisServer::Options{options_.persistence, options_.redis_args}, std::move(launch)));
    if (options_.proxied) {
      proxies_.push_back(std::make_unique<FaultProxy>(nodes_.back()->port()));
      addresses.push_back("127.0.0.1:" + std::to_string(proxies_.back()->port()));
    } else {
      addresses.push_back(nodes_.back()->address());
    }
  }
  const std::string yaml = sidecarYaml(options_, addresses);
  for (int i = 0; i < options_.sidecars; ++i) {
    sidecars_.push_back(
        std::make_unique<SidecarProcess>(SidecarProcess::Options{yaml, {}, /*wait_ready=*/true}));
  }
}

std::vector<int> Cluster::sidecarPorts() const {
  std::vector<int> ports;
  for (const auto& s : sidecars_) ports.push_back(s->port());
  return ports;
}

WorkloadOptions Cluster::workload(std::vector<std::string> locks, int clients, bool fenced) const {
  WorkloadOptions w;
  w.sidecar_ports = sidecarPorts();
  w.clients = clients;
  w.locks = std::move(locks);
  w.resource_port = resource_.port();
  w.ttl_ms = Timings::kTtlMs;
  w.wait_ms = Timings::kWaitMs;
  w.fenced = fenced;
  return w;
}

std::vector<std::string> Cluster::checkLeasesGone(const std::vector<std::string>& locks,
                                                  int64_t timeout_ms) {
  std::vector<std::string> left;
  pollUntil(timeout_ms, [&] {
    left.clear();
    for (auto& node : nodes_) {
      if (!node->running()) continue;
      RedisLink link(node->host(), node->port());
      for (const auto& lock : locks) {
        const std::string key = "sidelock:{" + lock + "}";
        if (link.command({"EXISTS", key}).at(0) != 0) {
          left.push_back("liveness: lease key " + key + " still on " + node->address() + " after " +
                         std::to_string(timeout_ms) + " ms of quiet");
        }
      }
    }
    return left.empty();
  });
  return left;
}

std::vector<std::string> Cluster::verdict(const std::string& scenario, History& history,
                                          MetricsWatch& metrics,
                                          const std::vector<std::string>& locks,
                                          const std::string& register_prefix, bool fenced) {
  std::vector<std::string> violations;
  auto add = [&](std::vector<std::string> more) {
    violations.insert(violations.end(), more.begin(), more.end());
  };
  add(checkMutualExclusion(history));
  add(checkTokenOrder(history));
  add(checkLiveness(history, Timings::kLivenessSlackMs));
  FencedRegister resource(resource_.port());
  for (const auto& lock : locks) add(resource.check(register_prefix + lock, fenced));
  add(metrics.finish());
  // Quiet from here: leases end by their TTL, so 3 x TTL is a generous bound.
  const int64_t quiesce_ms = 3 * Timings::kTtlMs + Timings::kLivenessSlackMs;
  for (int i = 0; i < sidecarCount(); ++i) {
    if (sidecar(i).running()) add(checkGaugesReturnToZero(sidecar(i).port(), i, quiesce_ms));
  }
  add(checkLeasesGone(locks, quiesce_ms));
  report(scenario, history, violations);
  return violations;
}

Scenario::Scenario(ClusterOptions options, std::vector<std::string> workload_locks, int clients)
    : cluster(std::move(options)),
      metrics(cluster.sidecarPorts()),
      locks(std::move(workload_locks)),
      workload(history, cluster.workload(locks, clients)) {}

std::vector<std::string> Scenario::verdict(const std::string& name,
                                           const std::vector<std::string>& more_locks) {
  workload.stop();
  std::vector<std::string> all = locks;
  all.insert(all.end(), more_locks.begin(), more_locks.end());
  return cluster.verdict(name, history, metrics, all);
}

HolderProcess::HolderProcess(History& history, int port, int process, int client,
                             const std::string& lock, int64_t ttl_ms, bool stream)
    : history_(history), process_(process), client_(client), lock_(lock) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  Operation grant{.process = process, .client = client, .kind = OpKind::kAcquire, .lock = lock};
  grant.invoke_us = nowUs();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dieWithParent(parent);
    close(fds[0]);
    std::string line;
    try {
      HttpClient http = HttpClient::tcp(port);
      json body{{"ttl_ms", ttl_ms}};
      if (stream) {
        body["hold"] = "stream";
        http.sendRequest("POST", "/v1/locks/" + lock + "/acquire", body.dump());
        if (http.readStreamHead()) line = http.readStreamLine().value_or("");
      } else {
        line = http.post("/v1/locks/" + lock + "/acquire", body.dump()).body;
      }
      line += "\n";
      if (write(fds[1], line.data(), line.size()) < 0) _exit(1);
      for (;;) pause();  // holds the lease (and the stream's connection) until killed
    } catch (const std::exception&) {
      _exit(1);
    }
  }
  pid_ = pid;
  close(fds[1]);
  std::string answer;
  pollfd pfd{fds[0], POLLIN, 0};
  char buf[512];
  while (answer.find('\n') == std::string::npos && poll(&pfd, 1, 5000) > 0) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  grant.complete_us = nowUs();
  const json j = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("token")) {
    crash();
    throw std::runtime_error("holder process got no grant: " + answer);
  }
  token_ = j["token"].get<uint64_t>();
  grant.status = 200;
  grant.token = token_;
  grant.validity_ms = j.value("ttl_ms", int64_t{0});
  // A stream hold is renewed for as long as the process lives: its window ends at the crash.
  if (stream) grant.validity_ms = 3600 * 1000;
  history_.add(grant);
}

HolderProcess::~HolderProcess() { crash(); }

void HolderProcess::crash() {
  if (pid_ <= 0) return;
  // The window ends when the kill is sent: the sidecar may see the connection drop (and grant
  // the lock to the next waiter) before waitpid() returns here.
  const int64_t killed_us = nowUs();
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (token_ == 0) return;
  Operation end{.process = process_,
                .client = client_,
                .kind = OpKind::kRelease,
                .lock = lock_,
                .token = token_};
  end.invoke_us = end.complete_us = killed_us;
  end.status = kNoAnswer;
  history_.add(end);
}

int queuedWaiters(int port, const std::string& lock) {
  try {
    HttpClient http = HttpClient::tcp(port);
    const json list = json::parse(http.get("/v1/locks").body, nullptr, false);
    if (!list.is_object()) return 0;
    for (const auto& w : list.value("waiters", json::array())) {
      if (w.value("name", "") == lock) return w.value("waiters", 0);
    }
  } catch (const std::exception&) {
  }
  return 0;
}

}  // namespace sidelock::testing::chaos
