#include "redis/transport.h"

#include <poll.h>
#include <uv.h>

#include <cstring>
#include <vector>

#include "event/lifetime.h"
#include "event/uv_handle.h"

namespace sidelock::backend {
namespace {

std::string uvError(int code) { return uv_strerror(code); }

// A uv_write whose bytes must live until its callback (only for what uv_try_write left over).
struct WriteRequest {
  uv_write_t req{};
  std::string bytes;
};

class SocketTransport final : public RedisTransport {
 public:
  SocketTransport(uv_loop_t* loop, event::Scheduler& scheduler)
      : loop_(loop), scheduler_(scheduler) {}
  ~SocketTransport() override { close(); }

  void connect(const config::RedisNodeAddress& address, Handler* handler) override {
    handler_ = handler;
    address_ = address.toString();
    if (!address.unix_path.empty()) {
      connectUnix(address.unix_path);
      return;
    }
    // A literal address needs no resolver; a host name is resolved on libuv's thread pool, never
    // on the loop thread (a slow DNS server must not freeze every client and timer).
    sockaddr_storage literal{};
    if (uv_ip4_addr(address.host.c_str(), address.port, reinterpret_cast<sockaddr_in*>(&literal)) ==
            0 ||
        uv_ip6_addr(address.host.c_str(), address.port,
                    reinterpret_cast<sockaddr_in6*>(&literal)) == 0) {
      candidates_.push_back(literal);
      connectNextCandidate();
      return;
    }
    resolve(address.host, address.port);
  }

  bool write(std::string& bytes) override {
    if (bytes.empty()) return true;
    if (!connected_ || closed_ || failed_) {
      bytes.clear();
      return false;
    }
    uv_buf_t buf = uv_buf_init(bytes.data(), static_cast<unsigned>(bytes.size()));
    // uv_try_write answers EAGAIN while earlier uv_writes are queued, so order is kept.
    int written = uv_try_write(stream_, &buf, 1);
    if (written == static_cast<int>(bytes.size())) {
      bytes.clear();
      return true;
    }
    if (written < 0 && written != UV_EAGAIN) {
      bytes.clear();
      failLater("write: " + uvError(written));
      return false;
    }
    const size_t done = written > 0 ? static_cast<size_t>(written) : 0;
    auto* w = new WriteRequest();
    w->bytes.assign(bytes, done);
    bytes.clear();
    uv_buf_t rest = uv_buf_init(w->bytes.data(), static_cast<unsigned>(w->bytes.size()));
    const int rc = uv_write(&w->req, stream_, &rest, 1, [](uv_write_t* req, int status) {
      auto* owned = reinterpret_cast<WriteRequest*>(req);
      auto* self = static_cast<SocketTransport*>(req->handle->data);
      delete owned;
      if (self != nullptr && status < 0 && status != UV_ECANCELED) {
        self->fail("write: " + uvError(status));
      }
    });
    if (rc != 0) {
      delete w;
      failLater("write: " + uvError(rc));
      return done > 0;  // the head went out: its requests may run
    }
    return true;
  }

  bool readable() const override {
    if (!connected_ || closed_ || stream_ == nullptr) return false;
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(stream_), &fd) != 0 || fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    if (resolve_req_ != nullptr) {
      // The resolver thread may still be running: its callback sees data == nullptr and only
      // frees the request.
      resolve_req_->data = nullptr;
      uv_cancel(reinterpret_cast<uv_req_t*>(resolve_req_));
      resolve_req_ = nullptr;
    }
    closeStream();
  }

 private:
  void resolve(const std::string& host, int port) {
    auto* r = new uv_getaddrinfo_t();
    r->data = this;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const std::string service = std::to_string(port);
    const int rc = uv_getaddrinfo(
        loop_, r,
        [](uv_getaddrinfo_t* req, int status, addrinfo* res) {
          auto* self = static_cast<SocketTransport*>(req->data);
          delete req;
          if (self == nullptr) {
            uv_freeaddrinfo(res);
            return;
          }
          self->resolve_req_ = nullptr;
          self->onResolved(status, res);
        },
        host.c_str(), service.c_str(), &hints);
    if (rc != 0) {
      delete r;
      failLater("resolve " + host + ": " + uvError(rc));
      return;
    }
    resolve_req_ = r;
  }

  void onResolved(int status, addrinfo* res) {
    if (status != 0) {
      uv_freeaddrinfo(res);
      fail("resolve " + address_ + ": " + uvError(status));
      return;
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
      sockaddr_storage s{};
      memcpy(&s, ai->ai_addr, ai->ai_addrlen);
      candidates_.push_back(s);
    }
    uv_freeaddrinfo(res);
    if (candidates_.empty()) {
      fail("resolve " + address_ + ": no IPv4 or IPv6 address");
      return;
    }
    connectNextCandidate();
  }

  // Tries the resolved addresses in order ("localhost" may give ::1 first while Redis listens
  // on 127.0.0.1 only); the last failure is the one reported.
  void connectNextCandidate() {
    closeStream();
    const sockaddr_storage addr = candidates_[next_candidate_++];
    uv_tcp_t* tcp = tcp_.allocate(this);
    if (int rc = uv_tcp_init(loop_, tcp); rc != 0) {
      tcp_.discardUninitialised();
      failLater("connect " + address_ + ": " + uvError(rc));
      return;
    }
    stream_ = reinterpret_cast<uv_stream_t*>(tcp);
    uv_tcp_nodelay(tcp, 1);
    uv_tcp_keepalive(tcp, 1, 30);
    auto* req = new uv_connect_t();
    const int rc = uv_tcp_connect(req, tcp, reinterpret_cast<const sockaddr*>(&addr), &onConnectCb);
    if (rc != 0) {
      delete req;
      onConnectResult(rc);
    }
  }

  void connectUnix(const std::string& path) {
    uv_pipe_t* pipe = pipe_.allocate(this);
    if (int rc = uv_pipe_init(loop_, pipe, 0); rc != 0) {
      pipe_.discardUninitialised();
      failLater("connect " + address_ + ": " + uvError(rc));
      return;
    }
    stream_ = reinterpret_cast<uv_stream_t*>(pipe);
    auto* req = new uv_connect_t();
    uv_pipe_connect(req, pipe, path.c_str(), &onConnectCb);
  }

  // Runs for every connect request, also with UV_ECANCELED when the handle closed first (then the
  // handle's data is already null).
  static void onConnectCb(uv_connect_t* req, int status) {
    auto* self = static_cast<SocketTransport*>(req->handle->data);
    delete req;
    if (self != nullptr) self->onConnectResult(status);
  }

  void onConnectResult(int status) {
    if (status != 0) {
      if (next_candidate_ < candidates_.size()) {
        connectNextCandidate();
        return;
      }
      failLater("connect " + address_ + ": " + uvError(status));
      return;
    }
    connected_ = true;
    const int rc = uv_read_start(
        stream_,
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          auto* self = static_cast<SocketTransport*>(h->data);
          *buf = uv_buf_init(self->read_buffer_, sizeof(self->read_buffer_));
        },
        [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
          auto* self = static_cast<SocketTransport*>(s->data);
          if (self == nullptr || nread == 0) return;
          if (nread < 0) {
            self->fail(nread == UV_EOF ? "connection closed by the server"
                                       : "read: " + uvError(static_cast<int>(nread)));
            return;
          }
          // Last statement: the handler may close or destroy this transport.
          self->handler_->onTransportData(self->read_buffer_, static_cast<size_t>(nread));
        });
    if (rc != 0) {
      fail("read: " + uvError(rc));
      return;
    }
    handler_->onTransportConnected();
  }

  void closeStream() {
    stream_ = nullptr;
    connected_ = false;
    tcp_.close();
    pipe_.close();
  }

  // From a libuv callback: tell the handler now (it may destroy us: last statement).
  void fail(std::string reason) {
    if (closed_ || failed_) return;
    failed_ = true;
    closeStream();
    handler_->onTransportError(std::move(reason));
  }

  // From inside one of our own calls: tell the handler on a later turn (src/README.md, rule 4).
  void failLater(std::string reason) {
    if (closed_ || failed_) return;
    failed_ = true;
    closeStream();
    scheduler_.post(alive_.guarded([this, reason = std::move(reason)] {
      if (!closed_) handler_->onTransportError(reason);
    }));
  }

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  event::LivenessToken alive_;  // expires with us: guards posted callbacks
  Handler* handler_ = nullptr;
  std::string address_;
  std::vector<sockaddr_storage> candidates_;
  size_t next_candidate_ = 0;
  uv_getaddrinfo_t* resolve_req_ = nullptr;
  event::UvHandle<uv_tcp_t> tcp_;
  event::UvHandle<uv_pipe_t> pipe_;
  uv_stream_t* stream_ = nullptr;  // tcp_ or pipe_, whichever is open
  bool connected_ = false;
  bool failed_ = false;
  bool closed_ = false;
  char read_buffer_[64 * 1024];
};

}  // namespace

std::unique_ptr<RedisTransport> makeSocketTransport(uv_loop_s* loop, event::Scheduler& scheduler) {
  return std::make_unique<SocketTransport>(loop, scheduler);
}

}  // namespace sidelock::backend
