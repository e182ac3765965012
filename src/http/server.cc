#include "http/server.h"

#include <algorithm>
#include <cstdlib>

#include "http/connection.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

constexpr int kListenBacklog = 511;
constexpr size_t kReadBufferSize = 64 * 1024;

}  // namespace

// --- HttpServer --------------------------------------------------------------------------------

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler,
                       const config::ListenConfig& limits, metrics::Metrics& metrics,
                       Handler handler)
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
}

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler,
                       const config::ListenConfig& limits, metrics::Metrics& metrics,
                       const Router& router)
    : HttpServer(loop, scheduler, limits, metrics, router.asHandler()) {}

HttpServer::~HttpServer() {
  close();
  connections_.clear();  // only non-empty if destroyed from inside a handler (a bug upstream)
}

Status HttpServer::start() {
  if (!limits_.tcp.empty()) SIDELOCK_RETURN_IF_ERROR(listenTcp(limits_.tcp));
  if (!limits_.unix_path.empty()) {
    Status s = listenUnix(limits_.unix_path, limits_.unix_mode);
    if (!s.isOk()) {
      tcp_.close();
      return s;
    }
  }
  return Status::ok();
}

Status HttpServer::listenTcp(std::string_view host_port) {
  if (closed_) return unavailable("server is closed");
  return tcp_.listenTcp(host_port, kListenBacklog, [this] { onConnection(tcp_); });
}

Status HttpServer::listenUnix(const std::string& path, uint32_t mode) {
  if (closed_) return unavailable("server is closed");
  return unix_.listenUnix(path, mode, kListenBacklog, [this] { onConnection(unix_); });
}

void HttpServer::onConnection(event::StreamListener& listener) {
  auto connection = std::make_unique<Connection>(this);
  if (!listener.accept(connection->stream_, connection.get()).isOk()) return;
  if (closed_ || connections_.size() >= static_cast<size_t>(std::max(0, limits_.max_connections))) {
    // Accepting and closing at once tells the client "no" instead of leaving it in the backlog.
    metrics_.http_connections_rejected.Increment();
    return;  // the destructor closes the stream
  }
  Connection* c = connection.get();
  connections_.emplace(c, std::move(connection));
  Guard guard(c);
  c->start(std::make_shared<const PeerIdentity>(identifyPeer(c->stream_.get())));
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
  if (done) scheduler_.post(std::move(done));
}

}  // namespace sidelock::http
