#include "http/server.h"

#include <algorithm>
#include <cstdlib>

#include "http/connection.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

constexpr int kListenBacklog = 511;
constexpr size_t kReadBufferSize = 64 * 1024;
// Connections over budget being answered 503 at the same time (each holds its socket until the
// client has read the answer, at most the linger time).
constexpr size_t kMaxRefusing = 64;

}  // namespace

// --- HttpServer --------------------------------------------------------------------------------

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler, const ServerOptions& limits,
                       metrics::Metrics& metrics, Handler handler)
    : loop_(loop),
      scheduler_(scheduler),
      limits_(limits),
      metrics_(metrics),
      handler_(std::move(handler)),
      tcp_(loop),
      unix_(loop),
      read_buffer_(kReadBufferSize) {
  // Only fails on a bad loop pointer.
  if (uv_prepare_init(loop_, flush_prepare_.allocate(this)) != 0) abort();
  if (uv_check_init(loop_, turn_check_.allocate(this)) != 0) abort();
  uv_check_start(turn_check_.get(), [](uv_check_t* h) {
    if (h->data != nullptr) ++static_cast<HttpServer*>(h->data)->turn_;
  });
  // Counting turns must not keep the loop alive.
  uv_unref(reinterpret_cast<uv_handle_t*>(turn_check_.get()));
}

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler, const ServerOptions& limits,
                       metrics::Metrics& metrics, const Router& router)
    : HttpServer(loop, scheduler, limits, metrics, router.asHandler()) {}

HttpServer::~HttpServer() {
  close();
  connections_.clear();  // only non-empty if destroyed from inside a handler (a bug upstream)
}

Status HttpServer::start() {
  if (!limits_.tcp.empty()) SIDELOCK_RETURN_IF_ERROR(listenTcp(limits_.tcp));
  if (!limits_.unix_path.empty()) {
    Status s = listenUnix(limits_.unix_path, limits_.unix_mode, limits_.unix_gid);
    if (!s.isOk()) {
      tcp_.close();
      return s;
    }
  }
  return Status::ok();
}

Status HttpServer::listenTcp(std::string_view host_port) {
  if (closed_) return unavailable("server is closed");
  return tcp_.listenTcp(host_port, kListenBacklog, [this] { onConnection(tcp_, tcp_budget_); });
}

Status HttpServer::listenUnix(const std::string& path, uint32_t mode, int64_t gid) {
  if (closed_) return unavailable("server is closed");
  return unix_.listenUnix(
      path, mode, kListenBacklog, [this] { onConnection(unix_, unix_budget_); }, gid);
}

void HttpServer::onConnection(event::StreamListener& listener, ConnectionBudget& budget) {
  auto connection = std::make_unique<Connection>(this);
  if (!listener.accept(connection->stream_, connection.get()).isOk()) return;
  if (closed_) {
    metrics_.http_connections_rejected.Increment();
    return;  // the destructor closes the stream
  }
  auto peer = std::make_shared<const PeerIdentity>(identifyPeer(connection->stream_.get()));
  std::string peer_key = limits_.max_connections_per_peer > 0 ? peer->key() : std::string();
  const bool admitted = makeRoom(budget, peer_key);
  if (!admitted) {
    metrics_.http_connections_rejected.Increment();
    // Each refusal holds a socket for a moment (answer, then linger); past this many at once,
    // close at accept instead.
    if (refusing_ >= kMaxRefusing) return;
  }
  Connection* c = connection.get();
  connections_.emplace(c, std::move(connection));
  Guard guard(c);
  if (admitted) {
    c->budget_ = &budget;
    c->peer_key_ = std::move(peer_key);
    countIn(c);
  } else {
    c->refusing_ = true;
    ++refusing_;
  }
  c->start(std::move(peer));
  if (!admitted) c->refuse();
}

bool HttpServer::makeRoom(ConnectionBudget& budget, const std::string& peer_key) {
  return budget.makeRoom(peer_key, limits_.max_connections, limits_.max_connections_per_peer,
                         [&](const std::string* peer) { return evictLongestIdle(budget, peer); });
}

bool HttpServer::evictLongestIdle(const ConnectionBudget& budget, const std::string* peer_key) {
  // A linear scan: it runs only when a listener is full, and a few thousand connections take
  // microseconds; an ordered idle list would cost every request a relink.
  Connection* victim = nullptr;
  // A client that already hung up, whose connection only waits to learn whether our last answer
  // was read, goes first: closing it costs nobody anything (not counted as an eviction).
  for (auto& [c, owned] : connections_) {
    if (c->budget_ != &budget || !c->awaitingReset()) continue;
    if (peer_key != nullptr && c->peer_key_ != *peer_key) continue;
    Guard guard(c);
    c->endResetWait();  // counted out at once; destroyed when the guard exits
    return true;
  }
  for (auto& [c, owned] : connections_) {
    if (c->budget_ != &budget || c->stream_hold_ || c->idle_since_us_ == 0 || !c->evictable()) {
      continue;
    }
    if (peer_key != nullptr && c->peer_key_ != *peer_key) continue;
    if (victim == nullptr || c->idle_since_us_ < victim->idle_since_us_) victim = c;
  }
  if (victim == nullptr) return false;
  metrics_.http_connections_evicted.Increment();
  Guard guard(victim);
  victim->closeNow();  // counted out at once; destroyed when the guard exits
  return true;
}

void HttpServer::countIn(Connection* c) { c->budget_->countIn(c->peer_key_); }

void HttpServer::countOut(Connection* c) {
  if (c->refusing_) {
    c->refusing_ = false;
    --refusing_;
  }
  if (c->budget_ == nullptr) return;
  if (c->stream_hold_) {
    c->stream_hold_ = false;
    --c->budget_->stream_holds;
    metrics_.http_stream_holds.Decrement();
  } else {
    c->budget_->countOut(c->peer_key_);
  }
  c->budget_ = nullptr;
}

void HttpServer::enterStreamHold(Connection* c) {
  if (c->budget_ == nullptr || c->stream_hold_) return;
  if (c->budget_->stream_holds >= static_cast<size_t>(std::max(0, limits_.max_stream_holds))) {
    return;  // the stream pool is full: the connection keeps its ordinary slot
  }
  ConnectionBudget* budget = c->budget_;
  countOut(c);
  c->budget_ = budget;
  c->stream_hold_ = true;
  ++budget->stream_holds;
  metrics_.http_stream_holds.Increment();
}

void HttpServer::leaveStreamHold(Connection* c) {
  if (c->budget_ == nullptr || !c->stream_hold_) return;
  ConnectionBudget* budget = c->budget_;
  countOut(c);
  // Back among ordinary connections, even if that is one over max_connections for a while:
  // evictions make room again.
  c->budget_ = budget;
  countIn(c);
}

void HttpServer::destroyConnection(Connection* connection) {
  if (connection->flush_queued_) std::erase(flush_queue_, connection);
  connections_.erase(connection);
}

void HttpServer::queueFlush(Connection* connection) {
  if (connection->flush_queued_ || !flush_prepare_) return;
  connection->flush_queued_ = true;
  flush_queue_.push_back(connection);
  if (flush_queue_.size() == 1) {
    uv_prepare_start(flush_prepare_.get(), [](uv_prepare_t* h) {
      if (h->data != nullptr) static_cast<HttpServer*>(h->data)->flushQueued();
    });
  }
}

void HttpServer::flushQueued() {
  // One at a time: a write error destroys its connection, and destroyConnection() takes a
  // queued connection out of the queue.
  while (!flush_queue_.empty()) {
    Connection* c = flush_queue_.back();
    flush_queue_.pop_back();
    c->flush_queued_ = false;
    Guard guard(c);
    c->flush();
  }
  uv_prepare_stop(flush_prepare_.get());
}

void HttpServer::addInFlight(int delta) {
  if (delta > 0) {
    ++in_flight_;
    metrics_.http_in_flight.Increment();
  } else {
    --in_flight_;
    metrics_.http_in_flight.Decrement();
  }
}

void HttpServer::recordResponse(std::string_view route, int status, int64_t received_us) {
  // Family::Add builds a label map and takes a lock; cache the series per (route, code).
  const std::string_view label = route.empty() ? kUnmatchedRoute : route;
  auto it = route_metrics_.find(label);
  if (it == route_metrics_.end()) {
    it = route_metrics_.emplace(label, RouteMetrics{&metrics_.httpLatency(label), {}}).first;
  }
  RouteMetrics& rm = it->second;
  prometheus::Counter* counter = nullptr;
  for (auto& [code, c] : rm.codes) {
    if (code == status) counter = c;
  }
  if (counter == nullptr) {
    counter = &metrics_.httpRequests(label, status);
    rm.codes.emplace_back(status, counter);
  }
  counter->Increment();
  if (received_us > 0) {
    rm.latency->Observe(static_cast<double>(scheduler_.nowUs() - received_us) / 1e6);
  }
}

void HttpServer::stopAccepting() {
  draining_ = true;
  tcp_.close();
  unix_.close();
}

size_t HttpServer::closeIdleConnections() {
  std::vector<Connection*> idle;
  for (auto& [c, owned] : connections_) {
    if (c->idleForClose()) idle.push_back(c);
  }
  for (Connection* c : idle) {
    if (connections_.count(c) == 0) continue;
    Guard guard(c);
    c->closeNow();
  }
  return idle.size();
}

void HttpServer::drainOutput(int64_t timeout_ms, std::function<void(size_t)> done) {
  drained_ = std::move(done);
  drain_timer_.start(scheduler_, std::max<int64_t>(0, timeout_ms), [this] {
    size_t unwritten = 0;
    for (const auto& [c, owned] : connections_) unwritten += c->hasUnwrittenOutput() ? 1 : 0;
    finishDrain(unwritten);
  });
  checkDrained();
}

// Called whenever a connection settles (after each of its events) while drainOutput() waits.
void HttpServer::checkDrained() {
  if (!drained_) return;
  for (const auto& [c, owned] : connections_) {
    if (c->hasUnwrittenOutput()) return;
  }
  drain_timer_.reset();
  finishDrain(0);
}

void HttpServer::finishDrain(size_t unwritten) {
  if (!drained_) return;
  scheduler_.post([done = std::exchange(drained_, nullptr), unwritten] { done(unwritten); });
}

void HttpServer::close(std::function<void()> done) {
  stopAccepting();
  closed_ = true;
  std::vector<Connection*> all;
  all.reserve(connections_.size());
  for (auto& [c, owned] : connections_) all.push_back(c);
  for (Connection* c : all) {
    // A client-gone callback may close other connections (or the server) meanwhile.
    if (connections_.count(c) == 0) continue;
    Guard guard(c);
    c->closeNow();
  }
  flush_prepare_.close();
  turn_check_.close();
  drain_timer_.reset();
  finishDrain(0);  // nothing is left to write once every connection is closed
  if (done) scheduler_.post(std::move(done));
}

}  // namespace sidelock::http
