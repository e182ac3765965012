// The benchmark's load generator: one epoll loop in the bench process driving many non-blocking
// keep-alive connections at once, HTTP/1.1 to a sidecar or RESP to redis-server. One thread and
// no per-call allocation, so that 64 clients cost the bench a few µs per call and the bench is
// never the bottleneck it measures (N threads doing blocking I/O would be: on a 2-core machine
// they fight the servers for the CPU and add a context switch per call).
//
// A connection has one reply handler for its whole life (the caller knows what it sent, the
// replies come back in order), so a call is: build the request bytes once, send(), wait for the
// handler. A chunked answer (an NDJSON stream: a campaign, an observe) reaches the handler once
// per line, as it arrives, and once more when it ends. Nothing here knows about locks.
//
// Handlers may send on any connection but must not destroy one: connections are destroyed
// outside runUntil().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace sidelock::bench {

using Clock = std::chrono::steady_clock;

/// One reply, valid only during the handler call.
struct Reply {
  bool broken = false;               // the connection failed before this request was answered
  int http_status = 0;               // HTTP
  std::string_view body = {};        // HTTP body; with `line`, one NDJSON line without its '\n'
  /// A line of a chunked answer that is still open: the request stays pending until the answer
  /// ends, which is delivered as one more Reply with `line` false and an empty body.
  bool line = false;
  long long integer = 0;             // RESP: integer reply, or the first element of an array reply
  bool redis_error = false;          // RESP error reply
  std::string_view redis_text = {};  // RESP status / string / error text
};

class Connection;

/// epoll plus one timerfd for sub-millisecond timers (open-loop schedules need them).
class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  /// Calls `fn` from the loop at `when` (on the next turn if it is in the past).
  void at(Clock::time_point when, std::function<void()> fn);
  /// Runs until `done()` is true (checked after every batch of events) or `deadline`; returns
  /// whether `done()` became true.
  bool runUntil(const std::function<bool()>& done, Clock::time_point deadline);

 private:
  friend class Connection;
  void watch(int fd, Connection* conn);
  void setWriteInterest(int fd, Connection* conn, bool want_write);
  void unwatch(int fd);
  void runDueTimers();
  void armTimerFd(Clock::time_point when);

  struct Timer {
    Clock::time_point when;
    uint64_t seq;  // FIFO among equal times
    std::function<void()> fn;
    bool operator>(const Timer& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  uint64_t next_seq_ = 0;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
};

/// Arms timerfd `fd` (CLOCK_MONOTONIC) to fire once at `when` (EventLoop's timers, GrpcLoop's
/// wakeAt).
void armTimerFdAt(int fd, Clock::time_point when);
/// The epoll_wait timeout (ms) of a loop that waits until `deadline` at most, its timers woken
/// by a timerfd: `now` (< deadline) is the reading the loop checked the deadline against, so the
/// timeout is never negative (which epoll would wait forever on).
int epollWaitMsUntil(Clock::time_point deadline, Clock::time_point now);

enum class Protocol { kHttp, kResp };

class Connection {
 public:
  using ReplyHandler = std::function<void(const Reply&)>;

  /// Connects (blocking, then switches to non-blocking): throws on failure.
  static std::unique_ptr<Connection> tcp(EventLoop& loop, int port, Protocol protocol);
  static std::unique_ptr<Connection> unix(EventLoop& loop, const std::string& path,
                                          Protocol protocol);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void onReply(ReplyHandler handler) { handler_ = std::move(handler); }
  /// Writes one complete request now (what the socket does not take is written when writable).
  /// On a broken connection the request is answered at once with `Reply::broken`.
  void send(std::string_view request);
  int pending() const { return pending_; }
  bool broken() const { return fd_ < 0; }

 private:
  friend class EventLoop;
  Connection(EventLoop& loop, int fd, Protocol protocol);
  void handleEvents(uint32_t events);
  void flush();
  void readAvailable();
  void parseHttp();
  /// Decodes the chunks of an open chunked answer from in_[pos...]; returns where it stopped.
  size_t parseChunks(size_t pos);
  void parseResp();
  void deliver(const Reply& reply);
  void fail();

  EventLoop& loop_;
  int fd_;
  Protocol protocol_;
  ReplyHandler handler_;
  int pending_ = 0;
  std::string out_;
  size_t out_sent_ = 0;
  bool want_write_ = false;
  std::string in_;  // HTTP bytes not yet parsed
  // An open chunked answer: its status, and the part of a line not ended yet.
  bool chunked_ = false;
  int chunked_status_ = 0;
  std::string partial_line_;
  redisReader* reader_ = nullptr;
};

/// An HTTP/1.1 POST with a JSON body, ready to send as-is.
std::string httpPost(std::string_view path, std::string_view json_body);
std::string httpGet(std::string_view path);
/// A RESP command, ready to send as-is.
std::string respCommand(const std::vector<std::string>& args);

}  // namespace sidelock::bench
