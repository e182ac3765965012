#include "support/redis_cluster.h"

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace sidelock::testing {

RedisCluster::RedisCluster(int masters, int replicas,
                           const std::function<std::vector<std::string>()>& extra_args) {
  RedisServer::Options options;
  options.cluster = true;
  for (int i = 0; i < masters * (1 + replicas); ++i) {
    // Ports in extra_args (a TLS port) were free when picked but may be taken, even by another
    // node's bus port (port + 10000), before the server binds them: ask for new ones and retry.
    for (int attempt = 0;; ++attempt) {
      if (extra_args) options.extra_args = extra_args();
      try {
        servers_.push_back(std::make_unique<RedisServer>(options));
        break;
      } catch (const std::exception&) {
        if (attempt == 4) throw;
      }
    }
  }
  std::string args = "--cluster create";
  for (const auto& s : servers_) args.append(" ").append(s->address());
  args += " --cluster-replicas " + std::to_string(replicas) + " --cluster-yes";
  if (runCli(args) != 0)
    throw std::runtime_error("redis-cli --cluster create failed:\n" + last_output_);
  for (const auto& s : servers_) ids_.push_back(s->cli({"CLUSTER", "MYID"}));
  if (!waitConsistent()) throw std::runtime_error("cluster did not settle:\n" + last_output_);
  if (replicas > 0 && !waitReplicasInSync()) {
    throw std::runtime_error("replicas did not finish their first sync");
  }
}

bool RedisCluster::waitReplicasInSync(int timeout_ms) {
  // cluster_state:ok comes before a replica's first full sync ends; until it does, WAIT on its
  // master answers 0 and a failover test would kill a master whose writes reached nobody.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    bool synced = true;
    for (const auto& s : servers_) {
      const std::string info = s->cli({"INFO", "replication"});
      if (info.find("role:slave") == std::string::npos) continue;
      synced = synced && info.find("master_link_status:up") != std::string::npos &&
               info.find("master_sync_in_progress:0") != std::string::npos;
    }
    if (synced) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int RedisCluster::runCli(const std::string& args) {
  const std::string cmd = "redis-cli " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  last_output_.clear();
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) last_output_.append(buf.data(), n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int RedisCluster::keySlot(const std::string& key) {
  return std::atoi(servers_[0]->cli({"CLUSTER", "KEYSLOT", key}).c_str());
}

namespace {

// CLUSTER NODES as `asker` sees it: per node "<id> <ip:port@bus> <flags> <master> <ping> <pong>
// <epoch> <link> <slot ranges...>"; a range is "a-b" or "a" ("[a->-id]" marks a migration).
// Returns, per node index, the slots it serves.
std::vector<std::vector<std::pair<int, int>>> slotRanges(RedisServer& asker,
                                                         const std::vector<std::string>& ids) {
  std::vector<std::vector<std::pair<int, int>>> out(ids.size());
  std::istringstream in(asker.cli({"CLUSTER", "NODES"}));
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    if (f.size() < 8) continue;
    size_t index = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == f[0]) index = i;
    }
    if (index == ids.size()) continue;
    for (size_t k = 8; k < f.size(); ++k) {
      if (f[k].empty() || f[k][0] == '[') continue;
      const size_t dash = f[k].find('-');
      const int first = std::atoi(f[k].c_str());
      const int last = dash == std::string::npos ? first : std::atoi(f[k].c_str() + dash + 1);
      out[index].emplace_back(first, last);
    }
  }
  return out;
}

}  // namespace

int RedisCluster::ownerOf(int slot, size_t asker) {
  const auto ranges = slotRanges(*servers_[asker], ids_);
  for (size_t n = 0; n < ranges.size(); ++n) {
    for (const auto& [first, last] : ranges[n]) {
      if (slot >= first && slot <= last) return static_cast<int>(n);
    }
  }
  return -1;
}

int RedisCluster::slotCount(size_t i) {
  const auto ranges = slotRanges(*servers_[i], ids_);  // kept: the loop reads into it
  int count = 0;
  for (const auto& [first, last] : ranges[i]) count += last - first + 1;
  return count;
}

int RedisCluster::reshard(size_t from, size_t to, int slots) {
  return runCli("--cluster reshard " + address(from) + " --cluster-from " + ids_[from] +
                " --cluster-to " + ids_[to] + " --cluster-slots " + std::to_string(slots) +
                " --cluster-yes --cluster-pipeline 100");
}

bool RedisCluster::startMigration(int slot, size_t from, size_t to,
                                  const std::vector<std::string>& keys) {
  const std::string s = std::to_string(slot);
  if (servers_[to]->cli({"CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]}) != "OK") return false;
  if (servers_[from]->cli({"CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]}) != "OK") return false;
  std::vector<std::string> migrate = {
      "MIGRATE", "127.0.0.1", std::to_string(servers_[to]->port()), "", "0", "5000", "KEYS"};
  migrate.insert(migrate.end(), keys.begin(), keys.end());
  return servers_[from]->cli(migrate) == "OK";
}

bool RedisCluster::finishMigration(int slot, size_t to) {
  for (const auto& server : servers_) {
    if (server->cli({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids_[to]}) != "OK") {
      return false;
    }
  }
  return true;
}

bool RedisCluster::waitConsistent(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    for (const auto& s : servers_) {
      ok = ok && s->cli({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
    }
    if (ok && runCli("--cluster check " + address(0)) == 0 &&
        last_output_.find("[OK] All 16384 slots covered") != std::string::npos &&
        last_output_.find("[ERR]") == std::string::npos &&
        last_output_.find("[WARNING]") == std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace sidelock::testing
