// handoff_bench: release -> acquire hand-off latency and acquire+release throughput of the real
// sidecar binary against a real redis-server, each figure also reported as a ratio against a
// baseline measured in the same run (direct Redis round trips to the same server), because the
// machine is shared and absolute numbers drift from run to run.
//
// Phases:
//   1. baseline: PING, the acquire / release Lua scripts by EVALSHA (direct), and uncontended
//      sidecar acquire / release calls over TCP and the Unix socket
//   2. hand-off on one sidecar: holder and waiter on sidecar A
//   3. hand-off across sidecars: holder on A, waiter on B (woken by the release pub/sub message)
//   4. throughput: K clients doing acquire+release pairs on distinct names, sidecar vs direct
//
// Output: a table for humans and one `BENCH_JSON {...}` line. Exit code 0 only if every hand-off
// and every call succeeded; the timings themselves are never asserted (see README.md).
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis/scripts.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::bench {
namespace {

using nlohmann::json;
using sidelock::testing::HttpClient;
using sidelock::testing::HttpResponse;
using sidelock::testing::RedisServer;
using sidelock::testing::SidecarProcess;
using Clock = std::chrono::steady_clock;

// The sidecars' fallback polling starts at this many ms, so a hand-off faster than it can only
// have come from the pushed wake-up (and a lost wake-up shows up as an outlier, not as noise).
constexpr int kFallbackRetryMinMs = 1000;
constexpr int kFallbackRetryMaxMs = 2000;

double msSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
  bool quick = false;
  int iterations = 300;        // hand-offs per scenario
  int latency_samples = 1000;  // baseline calls per figure
  int clients = 16;            // throughput clients
  double seconds = 2.0;        // throughput duration per side
  int settle_ms = 5;           // pause between "waiter is queued" and the release
};

[[noreturn]] void usage(const char* msg) {
  std::cerr << "handoff_bench: " << msg << "\n"
            << "usage: handoff_bench [--quick] [--iterations N] [--clients K] [--seconds S]\n"
            << "                     [--samples N] [--settle-ms MS]\n"
            << "env: SIDELOCK_BENCH_ITERATIONS, SIDELOCK_BENCH_CLIENTS, SIDELOCK_BENCH_SECONDS\n";
  std::exit(2);
}

int parsePositive(const std::string& flag, const char* text) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0 || v > 1000000)
    usage((flag + " wants a positive integer").c_str());
  return static_cast<int>(v);
}

Options parseOptions(int argc, char** argv) {
  Options o;
  // Flags come after the environment, so a flag wins. --quick first so explicit sizes override it.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      o.quick = true;
      o.iterations = 20;
      o.latency_samples = 100;
      o.clients = 4;
      o.seconds = 0.3;
    }
  }
  if (const char* e = std::getenv("SIDELOCK_BENCH_ITERATIONS")) {
    o.iterations = parsePositive("SIDELOCK_BENCH_ITERATIONS", e);
  }
  if (const char* e = std::getenv("SIDELOCK_BENCH_CLIENTS")) {
    o.clients = parsePositive("SIDELOCK_BENCH_CLIENTS", e);
  }
  if (const char* e = std::getenv("SIDELOCK_BENCH_SECONDS")) {
    o.seconds = parsePositive("SIDELOCK_BENCH_SECONDS", e);
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--quick") continue;
    if (a == "--iterations") {
      o.iterations = parsePositive(a, value());
    } else if (a == "--clients") {
      o.clients = parsePositive(a, value());
    } else if (a == "--seconds") {
      const char* v = value();
      char* end = nullptr;
      o.seconds = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(o.seconds > 0) || o.seconds > 600) {
        usage("--seconds wants a number in (0, 600]");
      }
    } else if (a == "--samples") {
      o.latency_samples = parsePositive(a, value());
    } else if (a == "--settle-ms") {
      // 0 is allowed: it releases as soon as the waiter shows as queued, which probes the race
      // between a waiter's first attempt, its sidecar's SUBSCRIBE and the release.
      const char* v = value();
      o.settle_ms = std::string(v) == "0" ? 0 : parsePositive(a, v);
    } else if (a == "--help" || a == "-h") {
      usage("help");
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Statistics

struct Summary {
  size_t n = 0;
  double p50 = 0, p99 = 0, max = 0, mean = 0;  // ms
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {  // nearest rank
    size_t idx = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(idx, 1, v.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

json toJson(const Summary& s) {
  auto r3 = [](double x) { return std::round(x * 1000.0) / 1000.0; };
  return json{{"n", s.n},
              {"p50_ms", r3(s.p50)},
              {"p99_ms", r3(s.p99)},
              {"max_ms", r3(s.max)},
              {"mean_ms", r3(s.mean)}};
}

// ---------------------------------------------------------------------------------------------
// Direct Redis (the baseline): hiredis' synchronous API, one connection per thread.

class DirectRedis {
 public:
  explicit DirectRedis(int port) {
    ctx_ = redisConnect("127.0.0.1", port);
    if (ctx_ == nullptr || ctx_->err != 0) {
      std::string err = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw std::runtime_error("connect to redis failed: " + err);
    }
  }
  ~DirectRedis() { redisFree(ctx_); }
  DirectRedis(const DirectRedis&) = delete;
  DirectRedis& operator=(const DirectRedis&) = delete;

  /// Runs one command; returns the integer reply, the first element of an array reply, or 1 for
  /// a status/string reply. Throws on a connection or error reply (a broken baseline is fatal).
  long long command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()));
    if (reply == nullptr) throw std::runtime_error(std::string("redis: ") + ctx_->errstr);
    long long v = 1;
    std::string error;
    switch (reply->type) {
      case REDIS_REPLY_INTEGER:
        v = reply->integer;
        break;
      case REDIS_REPLY_ARRAY:
        v = reply->elements > 0 && reply->element[0]->type == REDIS_REPLY_INTEGER
                ? reply->element[0]->integer
                : -1;
        break;
      case REDIS_REPLY_ERROR:
        error.assign(reply->str, reply->len);
        break;
      case REDIS_REPLY_STRING:
      case REDIS_REPLY_STATUS:
        last_string_.assign(reply->str, reply->len);
        break;
      default:
        break;
    }
    freeReplyObject(reply);
    if (!error.empty()) throw std::runtime_error("redis error: " + error);
    return v;
  }
  const std::string& lastString() const { return last_string_; }

 private:
  redisContext* ctx_ = nullptr;
  std::string last_string_;
};

/// The sidecar's own Lua scripts, loaded once, so the direct pairs do exactly the Redis work the
/// sidecar does (SET NX PX + INCR token; compare-and-delete + PUBLISH).
struct Scripts {
  std::string acquire_sha;
  std::string release_sha;
};

Scripts loadScripts(DirectRedis& r) {
  Scripts s;
  r.command({"SCRIPT", "LOAD", std::string(backend::scriptText(backend::ScriptId::kAcquire))});
  s.acquire_sha = r.lastString();
  r.command({"SCRIPT", "LOAD", std::string(backend::scriptText(backend::ScriptId::kRelease))});
  s.release_sha = r.lastString();
  return s;
}

// The direct pairs use their own key prefix so they can never touch the sidecars' keys.
constexpr const char* kDirectPrefix = "benchdirect:";

bool directAcquire(DirectRedis& r, const Scripts& s, const std::string& name,
                   const std::string& owner) {
  return r.command({"EVALSHA", s.acquire_sha, "2", backend::lockKey(kDirectPrefix, name),
                    backend::tokenKey(kDirectPrefix, name), owner, "10000",
                    std::to_string(backend::tokenCounterTtlMs(600'000))}) == 1;
}

bool directRelease(DirectRedis& r, const Scripts& s, const std::string& name,
                   const std::string& owner) {
  return r.command({"EVALSHA", s.release_sha, "1", backend::lockKey(kDirectPrefix, name), owner,
                    backend::releaseChannel(kDirectPrefix, name), name}) == 1;
}

// ---------------------------------------------------------------------------------------------
// Sidecar calls

struct Grant {
  std::string owner;
  int64_t token = 0;
};

std::optional<Grant> parseGrant(const HttpResponse& r) {
  if (r.status != 200) return std::nullopt;
  json b = json::parse(r.body, nullptr, false);
  if (!b.is_object() || !b.contains("owner") || !b.contains("token")) return std::nullopt;
  return Grant{b["owner"].get<std::string>(), b["token"].get<int64_t>()};
}

std::optional<Grant> sidecarAcquire(HttpClient& c, const std::string& name,
                                    const std::string& body = R"({"ttl_ms":10000})") {
  return parseGrant(c.post("/v1/locks/" + name + "/acquire", body));
}

bool sidecarRelease(HttpClient& c, const std::string& name, const std::string& owner) {
  return c.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump()).status == 200;
}

int64_t metricValue(const std::string& text, const std::string& series) {
  auto pos = text.find("\n" + series + " ");
  if (pos == std::string::npos) return -1;
  return std::stoll(text.substr(pos + series.size() + 2));
}

int64_t wakeups(int port) {
  HttpClient c = HttpClient::tcp(port);
  return metricValue(c.get("/metrics").body, "sidelock_wakeups_total");
}

/// Waiters queued on this sidecar for `name` (GET /v1/locks).
int queuedWaiters(HttpClient& c, const std::string& name) {
  json b = json::parse(c.get("/v1/locks").body, nullptr, false);
  if (!b.is_object() || !b.contains("waiters")) return 0;
  for (const auto& w : b["waiters"]) {
    if (w.value("name", "") == name) return w.value("waiters", 0);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Phase 1: baselines

struct Baseline {
  Summary redis_ping, direct_acquire, direct_release;
  Summary tcp_acquire, tcp_release, unix_acquire, unix_release;
  // The same calls after an idle pause as long as the hand-off's settle pause: every process
  // involved has gone to sleep, as in a hand-off, and waking them is part of the cost.
  Summary idle_ping, idle_tcp_release;
  int failures = 0;
};

Baseline runBaseline(const Options& o, int redis_port, const SidecarProcess& sidecar) {
  Baseline b;
  DirectRedis r(redis_port);
  Scripts s = loadScripts(r);
  std::vector<double> ping, acq, rel;
  for (int i = 0; i < o.latency_samples / 10; ++i) r.command({"PING"});  // warm-up
  for (int i = 0; i < o.latency_samples; ++i) {
    auto t0 = Clock::now();
    r.command({"PING"});
    ping.push_back(msSince(t0, Clock::now()));
  }
  for (int i = 0; i < o.latency_samples; ++i) {
    const std::string owner = "direct-owner-" + std::to_string(i);
    auto t0 = Clock::now();
    bool ok = directAcquire(r, s, "baseline", owner);
    auto t1 = Clock::now();
    ok = directRelease(r, s, "baseline", owner) && ok;
    auto t2 = Clock::now();
    if (!ok) ++b.failures;
    acq.push_back(msSince(t0, t1));
    rel.push_back(msSince(t1, t2));
  }
  b.redis_ping = summarize(ping);
  b.direct_acquire = summarize(acq);
  b.direct_release = summarize(rel);

  auto sidecarCalls = [&](HttpClient c, Summary* out_acq, Summary* out_rel) {
    std::vector<double> a, rr;
    for (int i = 0; i < o.latency_samples / 10; ++i) {  // warm-up: connections, script cache
      if (auto g = sidecarAcquire(c, "baseline")) sidecarRelease(c, "baseline", g->owner);
    }
    for (int i = 0; i < o.latency_samples; ++i) {
      auto t0 = Clock::now();
      auto g = sidecarAcquire(c, "baseline");
      auto t1 = Clock::now();
      if (!g) {
        ++b.failures;
        continue;
      }
      bool ok = sidecarRelease(c, "baseline", g->owner);
      auto t2 = Clock::now();
      if (!ok) ++b.failures;
      a.push_back(msSince(t0, t1));
      rr.push_back(msSince(t1, t2));
    }
    *out_acq = summarize(a);
    *out_rel = summarize(rr);
  };
  sidecarCalls(HttpClient::tcp(sidecar.port()), &b.tcp_acquire, &b.tcp_release);
  sidecarCalls(HttpClient::unix(sidecar.socketPath()), &b.unix_acquire, &b.unix_release);

  const int idle_samples = std::min(o.latency_samples, o.iterations);
  const auto settle = std::chrono::milliseconds(o.settle_ms);
  std::vector<double> idle_ping, idle_rel;
  for (int i = 0; i < idle_samples; ++i) {
    std::this_thread::sleep_for(settle);
    auto t0 = Clock::now();
    r.command({"PING"});
    idle_ping.push_back(msSince(t0, Clock::now()));
  }
  HttpClient c = HttpClient::tcp(sidecar.port());
  for (int i = 0; i < idle_samples; ++i) {
    auto g = sidecarAcquire(c, "baseline");
    if (!g) {
      ++b.failures;
      continue;
    }
    std::this_thread::sleep_for(settle);
    auto t0 = Clock::now();
    if (!sidecarRelease(c, "baseline", g->owner)) ++b.failures;
    idle_rel.push_back(msSince(t0, Clock::now()));
  }
  b.idle_ping = summarize(idle_ping);
  b.idle_tcp_release = summarize(idle_rel);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Phases 2 and 3: hand-off

struct Handoff {
  Summary latency;      // release sent -> waiter's 200 arrived
  Summary release_rtt;  // release sent -> holder's own 200 arrived
  int ok = 0;
  int failures = 0;
  int slower_than_fallback = 0;  // hand-offs only a fallback poll could explain
  int64_t pushed_wakeups = -1;   // sidelock_wakeups_total delta on the waiter's sidecar
  std::string first_error;
};

Handoff runHandoff(const Options& o, const SidecarProcess& holder_sc,
                   const SidecarProcess& waiter_sc, const std::string& name) {
  Handoff h;
  HttpClient holder = HttpClient::tcp(holder_sc.port());
  HttpClient waiter = HttpClient::tcp(waiter_sc.port());
  HttpClient probe = HttpClient::tcp(waiter_sc.port());
  const int64_t wakeups_before = wakeups(waiter_sc.port());
  std::vector<double> lat, rel;
  auto fail = [&](const std::string& why) {
    ++h.failures;
    if (h.first_error.empty()) h.first_error = why;
  };

  for (int i = 0; i < o.iterations; ++i) {
    auto held = sidecarAcquire(holder, name, R"({"ttl_ms":30000})");
    if (!held) {
      fail("holder could not acquire at iteration " + std::to_string(i));
      continue;
    }
    waiter.sendRequest("POST", "/v1/locks/" + name + "/acquire",
                       R"({"ttl_ms":30000,"wait_ms":20000})");
    // The waiter thread records the moment its answer is complete.
    auto answer = std::async(std::launch::async, [&waiter] {
      auto r = waiter.readResponse(25000);
      return std::make_pair(Clock::now(), r);
    });
    // Release only once the waiter is queued (and, after the settle pause, has made its first
    // attempt and its sidecar has subscribed), so we time a wake-up, not a race with the queueing.
    bool queued = false;
    for (int tries = 0; tries < 2000 && !queued; ++tries) {
      queued = queuedWaiters(probe, name) > 0;
      if (!queued) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (!queued) fail("waiter never showed as queued at iteration " + std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));

    const auto t0 = Clock::now();
    const bool released = sidecarRelease(holder, name, held->owner);
    const auto t_released = Clock::now();
    auto [t_granted, got] = answer.get();
    if (!released) fail("holder release failed at iteration " + std::to_string(i));
    std::optional<Grant> g = got ? parseGrant(*got) : std::nullopt;
    if (!g) {
      fail("waiter was not granted at iteration " + std::to_string(i) + ": " +
           (got ? std::to_string(got->status) + " " + got->body : "no answer"));
      // The connection may hold a late answer: start the next iteration on a fresh one.
      waiter = HttpClient::tcp(waiter_sc.port());
      continue;
    }
    if (g->token <= held->token)
      fail("fencing token did not grow at iteration " + std::to_string(i));
    const double ms = msSince(t0, t_granted);
    lat.push_back(ms);
    rel.push_back(msSince(t0, t_released));
    if (ms >= kFallbackRetryMinMs / 2.0) ++h.slower_than_fallback;
    ++h.ok;
    if (!sidecarRelease(waiter, name, g->owner)) {
      fail("waiter release failed at iteration " + std::to_string(i));
    }
  }
  h.latency = summarize(lat);
  h.release_rtt = summarize(rel);
  const int64_t wakeups_after = wakeups(waiter_sc.port());
  if (wakeups_before >= 0 && wakeups_after >= 0) h.pushed_wakeups = wakeups_after - wakeups_before;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Phase 4: throughput

struct Throughput {
  int clients = 0;
  double seconds = 0;
  int64_t pairs = 0;
  int64_t failures = 0;
  double pairs_per_sec = 0;
  Summary pair_latency;
};

/// Runs `clients` threads, each calling `pair(thread_index, iteration)` (true = success) until
/// the duration is over. Every thread builds its own connection through `make_worker` first.
template <typename MakeWorker>
Throughput runPairs(int clients, double seconds, MakeWorker make_worker) {
  Throughput t;
  t.clients = clients;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::atomic<int64_t> pairs{0}, failures{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      // A thrown error (connection refused, no answer in time) ends this client and counts as a
      // failed pair; it must not take the process down with children still running.
      try {
        auto pair = make_worker(i);
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        auto& mine = lat[static_cast<size_t>(i)];
        for (int64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
          auto t0 = Clock::now();
          bool ok = pair(n);
          mine.push_back(msSince(t0, Clock::now()));
          (ok ? pairs : failures).fetch_add(1, std::memory_order_relaxed);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "handoff_bench: client %d: %s\n", i, e.what());
        failures.fetch_add(1);
        ready.fetch_add(1);  // harmless if already counted: the wait below is ">="
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = Clock::now();
  go.store(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& th : threads) th.join();
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t.pairs = pairs.load();
  t.failures = failures.load();
  t.pairs_per_sec = static_cast<double>(t.pairs) / t.seconds;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  t.pair_latency = summarize(std::move(all));
  return t;
}

Throughput sidecarThroughput(const Options& o, const SidecarProcess& sidecar) {
  const int port = sidecar.port();
  return runPairs(o.clients, o.seconds, [port](int i) {
    auto c = std::make_shared<HttpClient>(HttpClient::tcp(port));
    const std::string name = "tp-" + std::to_string(i);
    return [c, name](int64_t) {
      auto g = sidecarAcquire(*c, name);
      return g.has_value() && sidecarRelease(*c, name, g->owner);
    };
  });
}

Throughput directThroughput(const Options& o, int redis_port, const Scripts& s) {
  return runPairs(o.clients, o.seconds, [redis_port, &s](int i) {
    auto r = std::make_shared<DirectRedis>(redis_port);
    const std::string name = "tp-" + std::to_string(i);
    const std::string owner = "direct-tp-owner-" + std::to_string(i);
    return [r, name, owner, &s](int64_t) {
      bool ok = directAcquire(*r, s, name, owner);
      return directRelease(*r, s, name, owner) && ok;
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Report

void printRow(const char* label, const Summary& s, double base_p50) {
  std::printf("  %-38s %7.3f %7.3f %7.3f   %6.2fx\n", label, s.p50, s.p99, s.max,
              ratio(s.p50, base_p50));
}

int run(const Options& o) {
  RedisServer redis;
  const std::string yaml = "backend:\n  type: redis\n  nodes: [\"" + redis.address() +
                           "\"]\nlocks:\n  retry_min_ms: " + std::to_string(kFallbackRetryMinMs) +
                           "\n  retry_max_ms: " + std::to_string(kFallbackRetryMaxMs) + "\n";
  // Both sidecars start before any thread does (they fork).
  SidecarProcess a({yaml, {}, true});
  SidecarProcess b({yaml, {}, true});

  std::cerr << "handoff_bench: baseline (" << o.latency_samples << " calls each)...\n";
  Baseline base = runBaseline(o, redis.port(), a);
  std::cerr << "handoff_bench: hand-off on one sidecar (" << o.iterations << ")...\n";
  Handoff same = runHandoff(o, a, a, "handoff-same");
  std::cerr << "handoff_bench: hand-off across sidecars (" << o.iterations << ")...\n";
  Handoff cross = runHandoff(o, a, b, "handoff-cross");
  std::cerr << "handoff_bench: throughput, " << o.clients << " clients, " << o.seconds
            << " s each way...\n";
  Scripts scripts;
  {
    DirectRedis r(redis.port());
    scripts = loadScripts(r);
  }
  Throughput direct_tp = directThroughput(o, redis.port(), scripts);
  Throughput sidecar_tp = sidecarThroughput(o, a);

  const int stop_a = a.stop();
  const int stop_b = b.stop();

  const double rtt = base.redis_ping.p50;
  std::printf(
      "\nsidelock handoff_bench%s — ratios are against the direct Redis PING p50 (%.3f ms)\n",
      o.quick ? " (quick)" : "", rtt);
  std::printf("  %-38s %7s %7s %7s   %7s\n", "figure (ms)", "p50", "p99", "max", "xRTT");
  printRow("redis PING (direct)", base.redis_ping, rtt);
  printRow("acquire script (direct EVALSHA)", base.direct_acquire, rtt);
  printRow("release script (direct EVALSHA)", base.direct_release, rtt);
  printRow("sidecar acquire, TCP", base.tcp_acquire, rtt);
  printRow("sidecar release, TCP", base.tcp_release, rtt);
  printRow("sidecar acquire, Unix socket", base.unix_acquire, rtt);
  printRow("sidecar release, Unix socket", base.unix_release, rtt);
  printRow("redis PING after idle (direct)", base.idle_ping, rtt);
  printRow("sidecar release after idle, TCP", base.idle_tcp_release, rtt);
  printRow("hand-off, same sidecar", same.latency, rtt);
  printRow("hand-off, other sidecar (pub/sub)", cross.latency, rtt);
  printRow("  holder's release call during it", cross.release_rtt, rtt);
  const double overhead_us = (base.tcp_acquire.p50 - base.direct_acquire.p50) * 1000.0;
  const double overhead_unix_us = (base.unix_acquire.p50 - base.direct_acquire.p50) * 1000.0;
  std::printf("  per-call overhead vs direct (acquire p50): TCP %+.0f us, Unix %+.0f us\n",
              overhead_us, overhead_unix_us);
  std::printf(
      "  hand-offs: same %d ok / %d failed, other %d ok / %d failed; pushed wake-ups "
      "counted on the waiter's sidecar: %lld; slower than the fallback poll: %d + %d\n",
      same.ok, same.failures, cross.ok, cross.failures,
      static_cast<long long>(cross.pushed_wakeups), same.slower_than_fallback,
      cross.slower_than_fallback);
  std::printf("\n  throughput, %d clients, distinct names   %12s %9s %9s\n", o.clients, "pairs/s",
              "pair p50", "pair p99");
  std::printf("  %-38s %12.0f %9.3f %9.3f\n", "direct to Redis (EVALSHA x2)",
              direct_tp.pairs_per_sec, direct_tp.pair_latency.p50, direct_tp.pair_latency.p99);
  std::printf("  %-38s %12.0f %9.3f %9.3f\n", "via sidecar (HTTP acquire+release)",
              sidecar_tp.pairs_per_sec, sidecar_tp.pair_latency.p50, sidecar_tp.pair_latency.p99);
  std::printf("  sidecar / direct pairs/s: %.2f  (failed pairs: direct %lld, sidecar %lld)\n",
              ratio(sidecar_tp.pairs_per_sec, direct_tp.pairs_per_sec),
              static_cast<long long>(direct_tp.failures),
              static_cast<long long>(sidecar_tp.failures));
  if (!same.first_error.empty())
    std::printf("  same-sidecar error: %s\n", same.first_error.c_str());
  if (!cross.first_error.empty())
    std::printf("  cross-sidecar error: %s\n", cross.first_error.c_str());
  std::printf("  sidecar exit codes: %d %d\n", stop_a, stop_b);

  auto tp = [](const Throughput& t) {
    return json{{"clients", t.clients},
                {"seconds", t.seconds},
                {"pairs", t.pairs},
                {"failures", t.failures},
                {"pairs_per_sec", std::round(t.pairs_per_sec)},
                {"pair_latency", toJson(t.pair_latency)}};
  };
  const double idle_rtt = base.idle_ping.p50;
  auto ho = [&](const Handoff& h) {
    return json{{"ok", h.ok},
                {"failures", h.failures},
                {"latency", toJson(h.latency)},
                {"holder_release", toJson(h.release_rtt)},
                {"p50_x_redis_rtt", ratio(h.latency.p50, rtt)},
                {"p99_x_redis_rtt", ratio(h.latency.p99, rtt)},
                {"p50_x_idle_redis_rtt", ratio(h.latency.p50, idle_rtt)},
                {"slower_than_fallback", h.slower_than_fallback},
                {"pushed_wakeups", h.pushed_wakeups}};
  };
  json out = {
      {"bench", "handoff"},
      {"quick", o.quick},
      {"iterations", o.iterations},
      {"settle_ms", o.settle_ms},
      {"fallback_retry_min_ms", kFallbackRetryMinMs},
      {"baseline",
       {{"redis_ping", toJson(base.redis_ping)},
        {"direct_acquire", toJson(base.direct_acquire)},
        {"direct_release", toJson(base.direct_release)},
        {"sidecar_tcp_acquire", toJson(base.tcp_acquire)},
        {"sidecar_tcp_release", toJson(base.tcp_release)},
        {"sidecar_unix_acquire", toJson(base.unix_acquire)},
        {"sidecar_unix_release", toJson(base.unix_release)},
        {"redis_ping_after_idle", toJson(base.idle_ping)},
        {"sidecar_tcp_release_after_idle", toJson(base.idle_tcp_release)},
        {"per_call_overhead_tcp_us", std::round(overhead_us)},
        {"per_call_overhead_unix_us", std::round(overhead_unix_us)},
        {"failures", base.failures}}},
      {"handoff_same_sidecar", ho(same)},
      {"handoff_other_sidecar", ho(cross)},
      {"throughput",
       {{"direct", tp(direct_tp)},
        {"sidecar", tp(sidecar_tp)},
        {"sidecar_over_direct", ratio(sidecar_tp.pairs_per_sec, direct_tp.pairs_per_sec)}}},
      {"sidecar_exit_codes", {stop_a, stop_b}},
  };
  std::printf("BENCH_JSON %s\n", out.dump().c_str());
  std::fflush(stdout);

  const bool ok = same.failures == 0 && cross.failures == 0 && same.ok == o.iterations &&
                  cross.ok == o.iterations && base.failures == 0 && direct_tp.failures == 0 &&
                  sidecar_tp.failures == 0 && sidecar_tp.pairs > 0 && direct_tp.pairs > 0 &&
                  stop_a == 0 && stop_b == 0;
  if (!ok) std::fprintf(stderr, "handoff_bench: FAILED (see the errors above)\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace sidelock::bench

int main(int argc, char** argv) {
  const auto options = sidelock::bench::parseOptions(argc, argv);
  try {
    return sidelock::bench::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "handoff_bench: %s\n", e.what());
    return 1;
  }
}
