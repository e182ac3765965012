#include "chaos/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "chaos/history.h"

namespace sidelock::testing::chaos {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

/// Closes with RST instead of FIN, as a crashed peer or a middlebox would.
void closeWithReset(int fd) {
  linger hard{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(fd);
}

struct Chunk {
  int64_t release_us;
  std::string bytes;
};

/// One proxied connection: the client's socket, Redis's socket, and what waits to go each way.
struct Link {
  int client_fd;
  int server_fd;
  std::deque<Chunk> to_server;
  std::deque<Chunk> to_client;
};

/// Sends every chunk that is due; false if the peer is gone.
bool flushDue(int fd, std::deque<Chunk>& queue, int64_t now_us) {
  while (!queue.empty() && queue.front().release_us <= now_us) {
    const std::string& bytes = queue.front().bytes;
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    queue.pop_front();
  }
  return true;
}

}  // namespace

FaultProxy::FaultProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback(0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    if (listen_fd_ >= 0) close(listen_fd_);
    throw std::runtime_error("fault proxy: cannot listen");
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { run(); });
}

FaultProxy::~FaultProxy() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

void FaultProxy::setMode(Mode mode, int64_t delay_ms, double loss) {
  std::lock_guard lock(mu_);
  settings_ = Settings{mode, delay_ms, loss};
}

FaultProxy::Settings FaultProxy::settings() const {
  std::lock_guard lock(mu_);
  return settings_;
}

void FaultProxy::run() {
  std::list<Link> links;
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> coin(0, 1);
  std::vector<char> buf(64 * 1024);
  auto drop = [](Link& l, bool reset) {
    reset ? closeWithReset(l.client_fd) : static_cast<void>(close(l.client_fd));
    reset ? closeWithReset(l.server_fd) : static_cast<void>(close(l.server_fd));
  };

  while (!stopping_) {
    if (reset_requested_.exchange(false)) {
      for (Link& l : links) drop(l, /*reset=*/true);
      links.clear();
    }
    const Settings now_settings = settings();
    // Wake for the next chunk that falls due, or every 20 ms to see mode changes and stop.
    int64_t next_due_us = nowUs() + 20'000;
    for (const Link& l : links) {
      for (const auto* q : {&l.to_server, &l.to_client}) {
        if (!q->empty()) next_due_us = std::min(next_due_us, q->front().release_us);
      }
    }
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Link& l : links) {
      fds.push_back({l.client_fd, POLLIN, 0});
      fds.push_back({l.server_fd, POLLIN, 0});
    }
    const int timeout_ms = static_cast<int>(std::max<int64_t>(0, next_due_us - nowUs()) / 1000);
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) continue;

    if (fds[0].revents & POLLIN) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client >= 0) {
        const int server = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in target = loopback(target_port_);
        if (server >= 0 &&
            connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == 0) {
          links.push_back(Link{client, server, {}, {}});
        } else {
          if (server >= 0) close(server);
          closeWithReset(client);  // Redis is down: refuse, as Redis itself would
        }
      }
    }

    size_t index = 1;
    for (auto it = links.begin(); it != links.end(); index += 2) {
      Link& l = *it;
      bool alive = true;
      const bool polled = index + 1 < fds.size();  // links accepted just now were not
      for (const bool from_client : {true, false}) {
        if (!polled) break;
        const pollfd& p = fds[index + (from_client ? 0 : 1)];
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = recv(p.fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
          alive = false;
          break;
        }
        const Mode mode = now_settings.mode;
        if (mode == Mode::kBlackhole || (mode == Mode::kDropReplies && !from_client)) continue;
        std::deque<Chunk>& queue = from_client ? l.to_server : l.to_client;
        int64_t release_us = nowUs();
        if (mode == Mode::kDelay || (mode == Mode::kLossy && coin(rng) < now_settings.loss)) {
          release_us += now_settings.delay_ms * 1000;
        }
        // Bytes of one stream never overtake each other.
        if (!queue.empty()) release_us = std::max(release_us, queue.back().release_us);
        queue.push_back(Chunk{release_us, std::string(buf.data(), static_cast<size_t>(n))});
      }
      const int64_t now = nowUs();
      alive = alive && flushDue(l.server_fd, l.to_server, now) &&
              flushDue(l.client_fd, l.to_client, now);
      if (!alive) {
        drop(l, /*reset=*/false);
        it = links.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Link& l : links) drop(l, /*reset=*/false);
}

}  // namespace sidelock::testing::chaos
