#include "config/config.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/duration.h"
#include "common/names.h"
#include "common/pod_identity.h"

namespace sidelock::config {
namespace {

// yaml-cpp throws; everything below runs inside one try block in loadConfigFromString and turns
// problems into a Status naming the key path.
struct ConfigError {
  std::string path;
  std::string message;
};

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw ConfigError{path, message};
}

std::string join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

/// A key given twice in one mapping: yaml-cpp keeps both and every lookup finds the first, so a
/// later override (a second `locks:` section appended to the file) would be ignored in silence.
void rejectDuplicateKeys(const YAML::Node& node, const std::string& path) {
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      if (kv.first.IsScalar() && !seen.insert(key).second) {
        fail(join(path, key), "given twice (line " + std::to_string(kv.first.Mark().line + 1) +
                                  "); give each key once");
      }
      rejectDuplicateKeys(kv.second, join(path, key));
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      rejectDuplicateKeys(node[i], path + "[" + std::to_string(i) + "]");
    }
  }
}

/// Walks a mapping, checking every key is known.
class Section {
 public:
  Section(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
    if (node_ && !node_.IsNull() && !node_.IsMap()) fail(path_, "must be a mapping");
  }

  /// Rejects keys that no reader asked for. Call after reading every field.
  void rejectUnknown(const std::set<std::string>& known) const {
    if (!node_ || node_.IsNull()) return;
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      if (known.count(key) == 0) fail(join(path_, key), "unknown key");
    }
  }

  /// The value under `key`, or an undefined node (false in a boolean context) when absent.
  YAML::Node child(const std::string& key) const {
    if (!node_ || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& map = node_;  // const operator[] never inserts
    return map[key];
  }
  std::string path(const std::string& key) const { return join(path_, key); }

  void readString(const std::string& key, std::string& out) const {
    YAML::Node n = child(key);
    if (!n) return;
    if (n.IsNull()) {
      out.clear();
      return;
    }
    if (!n.IsScalar()) fail(path(key), "must be a string");
    out = n.as<std::string>();
  }

  void readBool(const std::string& key, bool& out) const {
    YAML::Node n = child(key);
    if (!n) return;
    if (!n.IsScalar()) fail(path(key), "must be true or false");
    try {
      out = n.as<bool>();
    } catch (const YAML::Exception&) {
      fail(path(key), "must be true or false");
    }
  }

  template <typename Int>
  void readInt(const std::string& key, Int& out, int64_t min, int64_t max) const {
    readWholeNumber(key, out, min, max, /*durations=*/false);
  }

  /// A `*_ms` key: milliseconds (`30000`) or, as on the command line, a duration with a unit
  /// (`30s`, `5m`, `2h`, `500ms`).
  template <typename Int>
  void readDurationMs(const std::string& key, Int& out, int64_t min, int64_t max) const {
    readWholeNumber(key, out, min, max, /*durations=*/true);
  }

  void readDouble(const std::string& key, double& out, double min, double max) const {
    YAML::Node n = child(key);
    if (!n) return;
    if (!n.IsScalar()) fail(path(key), "must be a number");
    const std::string text = n.Scalar();
    errno = 0;
    char* end = nullptr;
    double v = strtod(text.c_str(), &end);
    if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
      fail(path(key), "must be a number, got \"" + text + "\"");
    }
    if (!(v >= min && v <= max)) {
      fail(path(key), "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    out = v;
  }

 private:
  template <typename Int>
  void readWholeNumber(const std::string& key, Int& out, int64_t min, int64_t max,
                       bool durations) const {
    YAML::Node n = child(key);
    if (!n) return;
    const std::string expected =
        durations ? "must be milliseconds or a duration with a unit (500ms, 30s, 5m, 2h)"
                  : "must be an integer";
    if (!n.IsScalar()) fail(path(key), expected);
    const std::string text = n.Scalar();
    errno = 0;
    char* end = nullptr;
    long long v = strtoll(text.c_str(), &end, 10);
    std::string in_ms;  // " (N ms)" when the text had a unit
    if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
      if (!durations) fail(path(key), expected + ", got \"" + text + "\"");
      StatusOr<int64_t> ms = parseDurationMs(text);
      if (!ms.isOk()) fail(path(key), expected + ": " + ms.status().message());
      v = *ms;
      in_ms = " (" + std::to_string(v) + " ms)";
    }
    if (v < min || v > max) {
      fail(path(key), "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                          ", got " + text + in_ms);
    }
    out = static_cast<Int>(v);
  }

  YAML::Node node_;
  std::string path_;
};

constexpr int64_t kMaxMs = 7LL * 24 * 3600 * 1000;  // one week: no timeout here needs more

void validateHostPort(const std::string& path, const std::string& value) {
  auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    fail(path, "must be \"host:port\", got \"" + value + "\"");
  }
  const std::string port = value.substr(colon + 1);
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) fail(path, "port must be 0..65535, got \"" + port + "\"");
}

RedisNodeAddress parseNode(const std::string& path, const std::string& value) {
  RedisNodeAddress a;
  if (value.rfind("unix:", 0) == 0) {
    a.unix_path = value.substr(5);
    if (a.unix_path.empty() || a.unix_path[0] != '/')
      fail(path, "unix socket path must be absolute");
    return a;
  }
  validateHostPort(path, value);
  auto colon = value.rfind(':');
  a.host = value.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  a.port = atoi(value.c_str() + colon + 1);
  if (a.port == 0) fail(path, "redis port must not be 0");
  return a;
}

/// A YAML list of scalars under `key` (absent: unchanged).
std::vector<std::string> readScalarList(const Section& s, const std::string& key) {
  std::vector<std::string> out;
  YAML::Node n = s.child(key);
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) fail(s.path(key), "must be a list");
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) fail(s.path(key) + "[" + std::to_string(i) + "]", "must be a string");
    out.push_back(n[i].Scalar());
  }
  return out;
}

std::string lowerAscii(std::string v) {
  for (char& ch : v) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  return v;
}

/// A name ("sidelock.internal"), an IPv4 address or a bracketed IPv6 address; no port.
bool validHostName(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  if (h.front() == '[') return h.size() > 2 && h.back() == ']';
  for (char ch : h) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
      return false;
  }
  return true;
}

/// An origin as browsers send it: scheme "://" host [":" port], nothing after.
bool validOrigin(const std::string& o) {
  size_t sep = o.find("://");
  if (sep == std::string::npos) return false;
  const std::string scheme = o.substr(0, sep);
  if (scheme != "http" && scheme != "https") return false;
  std::string rest = o.substr(sep + 3);
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
      return false;
    rest = rest.substr(0, colon);
  }
  return validHostName(rest);
}

/// Browser policy, socket group and peer uids (README "Access control").
void loadListenAccess(const Section& s, ListenConfig& c) {
  s.readString("unix_group", c.unix_group);
  if (!c.unix_group.empty()) {
    char* end = nullptr;
    long gid = strtol(c.unix_group.c_str(), &end, 10);
    if (*end == '\0' && gid >= 0) {
      c.unix_gid = gid;
    } else if (const group* g = getgrnam(c.unix_group.c_str())) {
      c.unix_gid = g->gr_gid;
    } else {
      fail(s.path("unix_group"), "no such group \"" + c.unix_group + "\"");
    }
  }
  const std::vector<std::string> uids = readScalarList(s, "unix_allowed_uids");
  for (size_t i = 0; i < uids.size(); ++i) {
    const std::string path = s.path("unix_allowed_uids") + "[" + std::to_string(i) + "]";
    char* end = nullptr;
    long uid = strtol(uids[i].c_str(), &end, 10);
    if (!uids[i].empty() && *end == '\0' && uid >= 0 && uid <= 0xfffffffeL) {
      c.unix_allowed_uids.push_back(static_cast<uint32_t>(uid));
    } else if (const passwd* pw = getpwnam(uids[i].c_str())) {
      c.unix_allowed_uids.push_back(pw->pw_uid);
    } else {
      fail(path, "must be a uid or a user name; no such user \"" + uids[i] + "\"");
    }
  }
  const std::vector<std::string> origins = readScalarList(s, "allowed_origins");
  for (size_t i = 0; i < origins.size(); ++i) {
    std::string o = lowerAscii(origins[i]);
    if (!validOrigin(o)) {
      fail(s.path("allowed_origins") + "[" + std::to_string(i) + "]",
           "must be an origin like \"http://localhost:3000\" (scheme://host[:port], no path), "
           "got \"" +
               origins[i] + "\"");
    }
    c.allowed_origins.push_back(std::move(o));
  }
  const std::vector<std::string> hosts = readScalarList(s, "allowed_hosts");
  for (size_t i = 0; i < hosts.size(); ++i) {
    std::string h = lowerAscii(hosts[i]);
    // "*" alone turns the Host check off, for a lock listener meant to be reached by address from
    // other hosts (no browser shares its loopback then). Never a pattern like "*.example".
    if (h == "*") {
      c.allowed_hosts.push_back(std::move(h));
      continue;
    }
    if (!validHostName(h)) {
      fail(s.path("allowed_hosts") + "[" + std::to_string(i) + "]",
           "must be a host name or address without a port, or \"*\" alone, got \"" + hosts[i] +
               "\"");
    }
    c.allowed_hosts.push_back(std::move(h));
  }
}

void loadAuth(const Section& root, AuthConfig& c, const ListenConfig& listen) {
  Section s(root.child("auth"), "auth");
  s.readString("tokens_file", c.tokens.file);
  s.readString("tokens_env", c.tokens.env);
  s.readString("admin_tokens_file", c.admin_tokens.file);
  s.readString("admin_tokens_env", c.admin_tokens.env);
  s.readBool("unix_requires_token", c.unix_requires_token);
  s.rejectUnknown({"tokens_file", "tokens_env", "admin_tokens_file", "admin_tokens_env",
                   "unix_requires_token"});
  if (c.unix_requires_token && !c.tokens.configured()) {
    fail(s.path("unix_requires_token"), "needs auth.tokens_file or auth.tokens_env");
  }
  if (c.admin_tokens.configured() && listen.admin.empty()) {
    fail(s.path(c.admin_tokens.file.empty() ? "admin_tokens_env" : "admin_tokens_file"),
         "is set but listen.admin is empty");
  }
  auto tokens = loadTokens(c.tokens);
  if (!tokens.isOk()) throw ConfigError{"", tokens.status().message()};
  c.token_entries = std::move(*tokens);
  auto admin = loadTokens(c.admin_tokens);
  if (!admin.isOk()) throw ConfigError{"", admin.status().message()};
  c.admin_token_entries = std::move(*admin);
}

void loadGrpcListen(const Section& s, ListenConfig& c) {
  s.readString("grpc", c.grpc);
  if (!c.grpc.empty()) {
    validateHostPort(s.path("grpc"), c.grpc);
    if (c.grpc == c.tcp || c.grpc == c.admin) {
      fail(s.path("grpc"), "must differ from listen.tcp and listen.admin");
    }
  }
  s.readString("grpc_unix", c.grpc_unix);
  // The uid rule holds for both Unix sockets (the HTTP one and the gRPC one): either will do.
  if (!c.unix_allowed_uids.empty() && c.unix_path.empty() && c.grpc_unix.empty()) {
    fail(s.path("unix_allowed_uids"), "is set but listen.unix and listen.grpc_unix are empty");
  }
  if (!c.grpc_unix.empty()) {
    if (c.grpc_unix[0] != '/') fail(s.path("grpc_unix"), "must be an absolute path");
    if (c.grpc_unix.size() >= 108) fail(s.path("grpc_unix"), "socket path longer than 107 bytes");
    if (c.grpc_unix == c.unix_path) fail(s.path("grpc_unix"), "must differ from listen.unix");
  }
  // The literal path lets tests/helm/render/config_keys.go place these keys (s is a parameter).
  Section g(s.child("grpc_limits"), "listen.grpc_limits");
  ListenConfig::GrpcLimits& l = c.grpc_limits;
  g.readInt("max_concurrent_streams", l.max_concurrent_streams, 1, 100'000);
  g.readInt("max_message_bytes", l.max_message_bytes, 1024, 64 << 20);
  g.readInt("max_header_list_bytes", l.max_header_list_bytes, 1024, 1 << 20);
  g.readDurationMs("idle_timeout_ms", l.idle_timeout_ms, 10, kMaxMs);
  g.readDurationMs("write_timeout_ms", l.write_timeout_ms, 10, kMaxMs);
  g.rejectUnknown({"max_concurrent_streams", "max_message_bytes", "max_header_list_bytes",
                   "idle_timeout_ms", "write_timeout_ms"});
}

void loadListen(const Section& root, ListenConfig& c) {
  Section s(root.child("listen"), "listen");
  s.readString("tcp", c.tcp);
  if (!c.tcp.empty()) validateHostPort(s.path("tcp"), c.tcp);
  s.readString("unix", c.unix_path);
  s.readString("admin", c.admin);
  if (!c.admin.empty()) validateHostPort(s.path("admin"), c.admin);
  if (!c.admin.empty() && c.admin == c.tcp) fail(s.path("admin"), "must differ from listen.tcp");
  if (!c.unix_path.empty() && c.unix_path.size() >= 108) {
    fail(s.path("unix"), "socket path longer than 107 bytes");
  }
  std::string mode;
  s.readString("unix_mode", mode);
  if (!mode.empty()) {
    char* end = nullptr;
    long m = strtol(mode.c_str(), &end, 8);
    if (*end != '\0' || m < 0 || m > 0777)
      fail(s.path("unix_mode"), "must be an octal mode like \"0660\"");
    c.unix_mode = static_cast<uint32_t>(m);
  }
  s.readInt("max_connections", c.max_connections, 1, 1'000'000);
  s.readInt("max_connections_per_peer", c.max_connections_per_peer, 0, 1'000'000);
  s.readInt("max_stream_holds", c.max_stream_holds, 0, 1'000'000);
  s.readInt("max_header_bytes", c.max_header_bytes, 1024, 1 << 20);
  s.readInt("max_body_bytes", c.max_body_bytes, 256, 16 << 20);
  s.readInt("max_pipelined_requests", c.max_pipelined_requests, 1, 10'000);
  s.readDurationMs("header_timeout_ms", c.header_timeout_ms, 10, kMaxMs);
  s.readDurationMs("idle_timeout_ms", c.idle_timeout_ms, 10, kMaxMs);
  s.readDurationMs("write_timeout_ms", c.write_timeout_ms, 10, kMaxMs);
  loadListenAccess(s, c);
  loadGrpcListen(s, c);
  s.rejectUnknown({"tcp", "unix", "admin", "grpc", "grpc_unix", "grpc_limits", "unix_mode",
                   "max_connections",
                   "max_connections_per_peer", "max_stream_holds", "max_header_bytes",
                   "max_body_bytes", "max_pipelined_requests", "header_timeout_ms",
                   "idle_timeout_ms", "write_timeout_ms", "unix_group", "unix_allowed_uids",
                   "allowed_origins", "allowed_hosts"});
  // gRPC alone is a whole sidecar (Dapr's gRPC-only SDKs); probes then go to listen.admin, or to
  // grpc.health.v1 (Kubernetes' grpc probes).
  if (c.tcp.empty() && c.unix_path.empty() && c.grpc.empty() && c.grpc_unix.empty()) {
    fail("listen", "at least one of listen.tcp, listen.unix, listen.grpc and listen.grpc_unix "
                   "must be set");
  }
}

std::string readSecretFile(const std::string& path, const std::string& key_path) {
  std::ifstream in(path);
  if (!in) fail(key_path, "cannot read \"" + path + "\"");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string v = ss.str();
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// Username and password from the env vars / secret file named under section `s` (the file wins).
void resolveCredentials(const Section& s, const std::string& username_env,
                        const std::string& password_env, const std::string& password_file,
                        const char* whose, std::string& username, std::string& password) {
  if (!username_env.empty()) {
    if (const char* v = getenv(username_env.c_str())) username = v;
  }
  if (!password_env.empty()) {
    if (const char* v = getenv(password_env.c_str())) password = v;
  }
  if (!password_file.empty()) password = readSecretFile(password_file, s.path("password_file"));
  if (!username.empty() && password.empty()) {
    fail(s.path("password_env"), std::string("a ") + whose + " username is set but no password");
  }
}

// backend.sentinel: only with type sentinel, where master_name is required.
void loadSentinel(const Section& backend, BackendConfig& c) {
  const YAML::Node node = backend.child("sentinel");
  Section s(node, backend.path("sentinel"));
  if (c.type != BackendType::kSentinel) {
    if (!node) return;
    std::string key;
    if (node.IsMap() && node.size() > 0) key = node.begin()->first.as<std::string>();
    fail(key.empty() ? backend.path("sentinel") : s.path(key),
         "only applies to backend.type sentinel");
  }
  s.readString("master_name", c.sentinel.master_name);
  s.readInt("wait_replicas", c.sentinel.wait_replicas, 0, 100);
  s.readString("username_env", c.sentinel.username_env);
  s.readString("password_env", c.sentinel.password_env);
  s.readString("password_file", c.sentinel.password_file);
  s.rejectUnknown(
      {"master_name", "wait_replicas", "username_env", "password_env", "password_file"});
  if (c.sentinel.master_name.empty()) {
    fail(s.path("master_name"),
         "required for backend.type sentinel (the name the sentinels "
         "monitor, as in `sentinel monitor <name> ...`)");
  }
  for (unsigned char ch : c.sentinel.master_name) {
    if (ch < 0x21 || ch > 0x7e)
      fail(s.path("master_name"), "must be printable ASCII without spaces");
  }
  resolveCredentials(s, c.sentinel.username_env, c.sentinel.password_env, c.sentinel.password_file,
                     "sentinel", c.sentinel.username, c.sentinel.password);
}

void loadBackend(const Section& root, BackendConfig& c) {
  Section s(root.child("backend"), "backend");
  std::string type = "redis";
  s.readString("type", type);
  if (type == "redis")
    c.type = BackendType::kRedis;
  else if (type == "redlock")
    c.type = BackendType::kRedlock;
  else if (type == "sentinel")
    c.type = BackendType::kSentinel;
  else if (type == "memory")
    c.type = BackendType::kMemory;
  else if (type == "cluster")
    c.type = BackendType::kCluster;
  else
    fail(s.path("type"),
         "must be one of redis, redlock, sentinel, cluster, memory; got \"" + type + "\"");

  YAML::Node nodes = s.child("nodes");
  if (nodes) {
    if (!nodes.IsSequence()) fail(s.path("nodes"), "must be a list of \"host:port\" strings");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string p = s.path("nodes") + "[" + std::to_string(i) + "]";
      if (!nodes[i].IsScalar()) fail(p, "must be a \"host:port\" string");
      c.nodes.push_back(parseNode(p, nodes[i].as<std::string>()));
    }
  }
  if (c.nodes.empty() && c.type == BackendType::kSentinel) {
    fail(s.path("nodes"), "type sentinel needs the sentinels' addresses (typically 3)");
  }
  if (c.nodes.empty()) c.nodes.push_back(parseNode("backend.nodes[0]", "127.0.0.1:6379"));
  std::set<std::string> seen;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    if (!seen.insert(c.nodes[i].toString()).second) {
      fail("backend.nodes[" + std::to_string(i) + "]", "duplicate node " + c.nodes[i].toString());
    }
  }
  if (c.type == BackendType::kRedis && c.nodes.size() != 1) {
    fail(s.path("nodes"), "type redis takes exactly one node (use type redlock for several)");
  }
  if (c.type == BackendType::kRedlock && (c.nodes.size() < 3 || c.nodes.size() % 2 == 0)) {
    fail(s.path("nodes"), "type redlock needs an odd number of nodes, at least 3 (typically 5)");
  }

  s.readString("key_prefix", c.key_prefix);
  if (c.key_prefix.size() > 64) fail(s.path("key_prefix"), "must be at most 64 bytes");
  for (unsigned char ch : c.key_prefix) {
    if (ch < 0x21 || ch > 0x7e || ch == '{' || ch == '}') {
      fail(s.path("key_prefix"), "must be printable ASCII without spaces or braces");
    }
  }
  s.readInt("db", c.db, 0, 10'000);
  if (c.type == BackendType::kCluster && c.db != 0) {
    fail(s.path("db"), "must be 0 for type cluster (Redis Cluster has only database 0)");
  }
  s.readString("username_env", c.username_env);
  s.readString("password_env", c.password_env);
  s.readString("password_file", c.password_file);
  s.readDurationMs("connect_timeout_ms", c.connect_timeout_ms, 1, 600'000);
  s.readDurationMs("command_timeout_ms", c.command_timeout_ms, 1, 600'000);
  s.readDurationMs("reconnect_min_ms", c.reconnect_min_ms, 1, 600'000);
  s.readDurationMs("reconnect_max_ms", c.reconnect_max_ms, 1, 600'000);
  if (c.reconnect_max_ms < c.reconnect_min_ms) {
    fail(s.path("reconnect_max_ms"), "must be >= backend.reconnect_min_ms");
  }
  s.readDurationMs("health_interval_ms", c.health_interval_ms, 10, 600'000);

  Section t(s.child("tls"), s.path("tls"));
  t.readBool("enabled", c.tls.enabled);
  t.readString("ca_file", c.tls.ca_file);
  t.readString("cert_file", c.tls.cert_file);
  t.readString("key_file", c.tls.key_file);
  t.readString("server_name", c.tls.server_name);
  t.rejectUnknown({"enabled", "ca_file", "cert_file", "key_file", "server_name"});
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    fail(t.path(c.tls.cert_file.empty() ? "cert_file" : "key_file"),
         "cert_file and key_file go together (mutual TLS needs both)");
  }
  if (c.tls.enabled) {
    for (const auto& [key, file] :
         {std::pair<const char*, const std::string&>{"ca_file", c.tls.ca_file},
          {"cert_file", c.tls.cert_file},
          {"key_file", c.tls.key_file}}) {
      if (!file.empty() && access(file.c_str(), R_OK) != 0) {
        fail(t.path(key), "cannot read \"" + file + "\": " + strerror(errno));
      }
    }
    for (const auto& node : c.nodes) {
      if (!node.unix_path.empty()) {
        fail(s.path("tls.enabled"),
             "TLS needs host:port nodes; " + node.toString() + " is a Unix socket");
      }
    }
  } else if (!c.tls.ca_file.empty() || !c.tls.cert_file.empty() || !c.tls.server_name.empty()) {
    fail(t.path("enabled"), "TLS settings are given but tls.enabled is false");
  }

  Section r(s.child("redlock"), s.path("redlock"));
  r.readDurationMs("node_timeout_ms", c.redlock.node_timeout_ms, 1, 60'000);
  r.readDouble("drift_factor", c.redlock.drift_factor, 0.0, 0.5);
  r.readBool("delayed_restart", c.redlock.delayed_restart);
  r.readDurationMs("retry_jitter_ms", c.redlock.retry_jitter_ms, 0, 60'000);
  r.rejectUnknown({"node_timeout_ms", "drift_factor", "delayed_restart", "retry_jitter_ms"});

  s.rejectUnknown({"type", "nodes", "key_prefix", "db", "username_env", "password_env",
                   "password_file", "connect_timeout_ms", "command_timeout_ms", "reconnect_min_ms",
                   "reconnect_max_ms", "health_interval_ms", "tls", "redlock", "username",
                   "password", "sentinel"});
  // Credentials in the YAML itself are refused on purpose: config files end up in ConfigMaps and
  // repositories. (Listed as known above so the message is specific.)
  if (s.child("password") || s.child("username")) {
    fail(s.child("password") ? s.path("password") : s.path("username"),
         "credentials are not read from the config file; set backend.password_env / "
         "backend.username_env (environment) or backend.password_file");
  }

  resolveCredentials(s, c.username_env, c.password_env, c.password_file, "Redis", c.username,
                     c.password);
  loadSentinel(s, c);
}

void loadLocks(const Section& root, LocksConfig& c) {
  Section s(root.child("locks"), "locks");
  s.readDurationMs("default_ttl_ms", c.default_ttl_ms, 1, kMaxMs);
  s.readDurationMs("max_ttl_ms", c.max_ttl_ms, 1, kMaxMs);
  s.readDurationMs("max_wait_ms", c.max_wait_ms, 0, kMaxMs);
  s.readDurationMs("max_lock_delay_ms", c.max_lock_delay_ms, 0, kMaxMs);
  s.readInt("max_name_bytes", c.max_name_bytes, 1, 1024);
  s.readInt("max_owner_bytes", c.max_owner_bytes, 8, 1024);
  s.readInt("max_waiters_per_lock", c.max_waiters_per_lock, 0, 1'000'000);
  s.readInt("max_waiters", c.max_waiters, 0, 10'000'000);
  s.readInt("max_event_streams", c.max_event_streams, 0, 1'000'000);
  s.readDurationMs("retry_min_ms", c.retry_min_ms, 1, 60'000);
  s.readDurationMs("retry_max_ms", c.retry_max_ms, 1, 600'000);
  s.readDouble("renew_fraction", c.renew_fraction, 0.05, 0.9);
  s.readDurationMs("default_max_hold_ms", c.default_max_hold_ms, 0, kMaxMs * 52);
  s.readDurationMs("max_hold_ms_limit", c.max_hold_ms_limit, 1, kMaxMs * 52);
  s.readDurationMs("request_id_window_ms", c.request_id_window_ms, 0, kMaxMs * 52);
  s.readInt("max_request_ids", c.max_request_ids, 0, 10'000'000);
  s.readInt("max_request_id_bytes", c.max_request_id_bytes, 0, int64_t{1} << 40);
  s.rejectUnknown({"default_ttl_ms", "max_ttl_ms", "max_wait_ms", "max_lock_delay_ms",
                   "max_name_bytes", "max_owner_bytes", "max_waiters_per_lock", "max_waiters",
                   "retry_min_ms", "retry_max_ms", "max_event_streams", "renew_fraction",
                   "default_max_hold_ms", "max_hold_ms_limit", "request_id_window_ms",
                   "max_request_ids", "max_request_id_bytes"});
  if (c.default_ttl_ms > c.max_ttl_ms)
    fail(s.path("default_ttl_ms"), "must be <= locks.max_ttl_ms");
  if (c.retry_max_ms < c.retry_min_ms)
    fail(s.path("retry_max_ms"), "must be >= locks.retry_min_ms");
  if (c.default_max_hold_ms > c.max_hold_ms_limit) {
    fail(s.path("default_max_hold_ms"), "must be <= locks.max_hold_ms_limit");
  }
  if (c.max_waiters_per_lock > c.max_waiters) {
    fail(s.path("max_waiters_per_lock"), "must be <= locks.max_waiters");
  }
}

void loadDapr(const Section& root, DaprConfig& c) {
  Section s(root.child("dapr"), "dapr");
  s.readBool("enabled", c.enabled);
  if (s.child("stores")) {
    c.stores = readScalarList(s, "stores");
    if (c.stores.empty()) fail(s.path("stores"), "must name at least one store (or \"*\")");
    for (size_t i = 0; i < c.stores.size(); ++i) {
      if (c.stores[i].empty()) fail(s.path("stores") + "[" + std::to_string(i) + "]", "is empty");
    }
  }
  s.readString("owner_secret_env", c.owner_secret_env);
  s.readString("owner_secret_file", c.owner_secret_file);
  s.readString("app_id", c.app_id);
  s.rejectUnknown({"enabled", "stores", "owner_secret_env", "owner_secret_file", "app_id"});
  if (c.app_id.empty() || c.app_id.size() > 63 ||
      c.app_id.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
          std::string::npos) {
    fail(s.path("app_id"), "must be 1 to 63 letters, digits, '-' or '_' (a Dapr app id)");
  }
  if (!c.owner_secret_env.empty()) {
    if (const char* v = getenv(c.owner_secret_env.c_str())) c.owner_secret = v;
  }
  if (!c.owner_secret_file.empty()) {
    c.owner_secret = readSecretFile(c.owner_secret_file, s.path("owner_secret_file"));
  }
  if (!c.owner_secret.empty() && c.owner_secret.size() < 16) {
    fail(s.path(c.owner_secret_file.empty() ? "owner_secret_env" : "owner_secret_file"),
         "the secret must have at least 16 characters");
  }
}

/// `text` with every `${VAR}` replaced by the environment variable VAR (a name of letters, digits
/// and '_', not starting with a digit) and every `$$` by one `$`; any other `$` stays as it is. An
/// unset variable, a bad name or a `${` without its `}` fails naming `path`.
std::string expandEnvironment(const std::string& path, const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size() || (text[i + 1] != '$' && text[i + 1] != '{')) {
      out += text[i];
      continue;
    }
    if (text[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    const size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      fail(path, "\"${\" without its \"}\" (write $$ for a literal $)");
    }
    const std::string var = text.substr(i + 2, close - i - 2);
    bool valid = !var.empty() && !(var[0] >= '0' && var[0] <= '9');
    for (unsigned char c : var) {
      valid = valid && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '_');
    }
    if (!valid) {
      fail(path, "\"${" + var + "}\" is not an environment variable name (letters, digits and _)");
    }
    const char* v = getenv(var.c_str());
    if (v == nullptr) fail(path, "the environment variable " + var + " is not set");
    out += v;
    i = close;
  }
  return out;
}

// health: the limits on probes, before the elections whose health they limit.
void loadHealthLimits(const Section& root, HealthLimits& h) {
  Section s(root.child("health"), "health");
  for (size_t i = 0; const std::string& text : readScalarList(s, "allowed_ports")) {
    const std::string at = s.path("allowed_ports") + "[" + std::to_string(i++) + "]";
    char* end = nullptr;
    const long port = strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || port < 1 || port > 65535) {
      fail(at, "must be a port 1..65535, got \"" + text + "\"");
    }
    h.allowed_ports.push_back(static_cast<int>(port));
  }
  s.readInt("max_probes", h.max_probes, 1, static_cast<int64_t>(kMaxHealthProbesLimit));
  s.rejectUnknown({"allowed_ports", "max_probes"});
}

// identity and elections: after locks (the TTL limits) and before anything uses them.
void loadElections(const Section& root, Config& c) {
  // Absent or "" (what a template renders for an unset value): the default.
  root.readString("identity", c.identity);
  const bool given = !c.identity.empty();
  if (!given) c.identity = podIdentity(systemGetenv, systemHostName);
  if (!c.identity.empty()) {
    if (std::string problem = candidateProblem(c.identity); !problem.empty()) {
      fail("identity", problem + (given ? "" : " (from $POD_NAME or the host name: set identity)"));
    }
  }

  const YAML::Node list = root.child("elections");
  if (!list || list.IsNull()) return;
  if (!list.IsSequence()) {
    fail("elections", "must be a list of {name, value, ttl_ms} (e.g. [{name: scheduler}])");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "elections[" + std::to_string(i) + "]";
    if (!list[i].IsMap()) fail(at, "must be a mapping {name, value, ttl_ms}");
    Section e(list[i], at);
    ElectionConfig election;
    election.ttl_ms = c.locks.default_ttl_ms;
    e.readString("name", election.name);
    e.readString("value", election.value);
    e.readDurationMs("ttl_ms", election.ttl_ms, 1, c.locks.max_ttl_ms);
    if (e.child("health") && !e.child("health").IsNull()) {
      // The same fields and limits as an acquire's "health".
      Section h(e.child("health"), e.path("health"));
      HealthSpec spec;
      std::string url;
      h.readString("url", url);
      h.readDurationMs("interval_ms", spec.interval_ms, kMinHealthIntervalMs, kMaxHealthIntervalMs);
      h.readInt("failures", spec.failures, 1, kMaxHealthFailures);
      h.readDurationMs("grace_ms", spec.grace_ms, 0, kMaxHealthGraceMs);
      h.rejectUnknown({"url", "interval_ms", "failures", "grace_ms"});
      if (url.empty()) {
        fail(h.path("url"),
             "required: the app's health endpoint, e.g. http://127.0.0.1:8080/healthz");
      }
      StatusOr<LoopbackUrl> parsed = parseLoopbackUrl(url, "the URL");
      if (!parsed.isOk()) fail(h.path("url"), parsed.status().message());
      spec.url = std::move(*parsed);
      if (std::string problem = healthPortProblem(spec.url, c.health, "the URL");
          !problem.empty()) {
        fail(h.path("url"), problem);
      }
      election.health = std::move(spec);
    }
    e.rejectUnknown({"name", "value", "ttl_ms", "health"});
    if (!e.child("name")) fail(e.path("name"), "required: the election's name");
    if (std::string problem = lockNameProblem(election.name,
                                              static_cast<size_t>(c.locks.max_name_bytes));
        !problem.empty()) {
      fail(e.path("name"), problem + " (elections are named like locks)");
    }
    if (!names.insert(election.name).second) {
      fail(e.path("name"), "\"" + election.name + "\" is listed twice");
    }
    election.value = expandEnvironment(e.path("value"), election.value);
    if (election.value.size() > kMaxLeaderValueBytes) {
      fail(e.path("value"), "is " + std::to_string(election.value.size()) +
                                " bytes long (after ${VAR} expansion); the limit is " +
                                std::to_string(kMaxLeaderValueBytes));
    }
    c.elections.push_back(std::move(election));
  }
  if (!c.elections.empty() && c.identity.empty()) {
    fail("identity", "required for elections: no $POD_NAME and no host name to default to");
  }
  // Every election's probe runs from start-up: they must fit under health.max_probes.
  std::set<std::string> probes;
  for (const ElectionConfig& election : c.elections) {
    if (election.health) {
      probes.insert(std::to_string(election.health->interval_ms) + " " + election.health->url.text);
    }
  }
  if (probes.size() > c.health.max_probes) {
    fail("health.max_probes", "is " + std::to_string(c.health.max_probes) +
                                  " but elections[] name " + std::to_string(probes.size()) +
                                  " distinct health probes (URL and interval_ms)");
  }
}

Config load(const YAML::Node& root_node) {
  Config c;
  Section root(root_node, "");
  loadListen(root, c.listen);
  loadBackend(root, c.backend);
  loadLocks(root, c.locks);
  loadHealthLimits(root, c.health);
  loadElections(root, c);

  Section sd(root.child("shutdown"), "shutdown");
  sd.readDurationMs("grace_ms", c.shutdown.grace_ms, 0, 3'600'000);
  sd.readBool("release_held", c.shutdown.release_held);
  sd.rejectUnknown({"grace_ms", "release_held"});

  Section lg(root.child("log"), "log");
  std::string level = "info", format = "logfmt";
  lg.readString("level", level);
  lg.readString("format", format);
  auto parsed_level = parseLogLevel(level);
  if (!parsed_level.isOk()) fail(lg.path("level"), parsed_level.status().message());
  auto parsed_format = parseLogFormat(format);
  if (!parsed_format.isOk()) fail(lg.path("format"), parsed_format.status().message());
  c.log.level = *parsed_level;
  c.log.format = *parsed_format;
  lg.rejectUnknown({"level", "format"});

  Section mt(root.child("metrics"), "metrics");
  mt.readInt("holder_top_n", c.metrics.holder_top_n, 0, 100);
  mt.rejectUnknown({"holder_top_n"});

  loadAuth(root, c.auth, c.listen);
  loadDapr(root, c.dapr);
  root.rejectUnknown({"listen", "backend", "locks", "shutdown", "log", "metrics", "auth", "dapr",
                      "identity", "elections", "health"});
  if (c.backend.type == BackendType::kRedlock)
    c.locks.retry_jitter_ms = c.backend.redlock.retry_jitter_ms;
  if (c.backend.type == BackendType::kRedlock &&
      c.backend.redlock.node_timeout_ms * 4 > c.locks.default_ttl_ms) {
    fail("backend.redlock.node_timeout_ms", "must be far below locks.default_ttl_ms (at most 1/4)");
  }
  return c;
}

}  // namespace

std::string RedisNodeAddress::toString() const {
  if (!unix_path.empty()) return "unix:" + unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

StatusOr<Config> loadConfigFromString(const std::string& yaml_text) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (root && !root.IsNull() && !root.IsMap()) {
      return invalidArgument("config: the top level must be a mapping");
    }
    rejectDuplicateKeys(root, "");
    return load(root);
  } catch (const ConfigError& e) {
    // An empty path: the message names its key already (token files name key and line).
    return invalidArgument(e.path.empty() ? e.message : e.path + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return invalidArgument(std::string("config: YAML syntax error: ") + e.what());
  }
}

StatusOr<Config> loadConfigFromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalidArgument("cannot read config file \"" + path + "\"");
  std::stringstream ss;
  ss << in.rdbuf();
  auto result = loadConfigFromString(ss.str());
  if (!result.isOk()) return invalidArgument(path + ": " + result.status().message());
  return result;
}

}  // namespace sidelock::config
