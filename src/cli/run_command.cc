#include "cli/run_command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/acquire_stream.h"
#include "cli/exit_codes.h"
#include "cli/lease_deadline.h"

namespace sidelock::cli {
namespace {

// One acquire request waits at most this long at the sidecar; longer (or endless) --wait values
// are served by asking again, so the sidecar's locks.max_wait_ms never gets in the way.
constexpr int64_t kWaitChunkMs = 30'000;
// How long past the requested wait the sidecar may take to answer before we call it hung.
constexpr int64_t kAnswerSlackMs = 10'000;
constexpr int64_t kConnectTimeoutMs = 5'000;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
// After SIGKILL, how long we wait for CMD's process group to be reaped before releasing anyway
// (a process stuck in the kernel keeps its copy of the connection, so the lease, until it goes).
constexpr int64_t kReapGroupTimeoutMs = 5'000;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int pollTimeout(int64_t deadline_ms) {
  if (deadline_ms < 0) return -1;  // no deadline
  int64_t left = deadline_ms - nowMs();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

/// The keeper's body (see Runner::startKeeper): reads CMD's process group id from `commands_fd`,
/// then one byte ("stand down") or end of file (we died without a word: SIGKILL the group).
[[noreturn]] void keeperMain(int commands_fd) {
  // Holding nothing else: not the lease's connection (the lease must end with CMD, not with us),
  // nor stdout (a reader of sidelock run's output would wait for us).
  if (commands_fd > 0) close_range(0, static_cast<unsigned>(commands_fd) - 1, 0);
  close_range(static_cast<unsigned>(commands_fd) + 1, ~0U, 0);
  // Out of sidelock run's process group, so a signal to its whole job does not take us along.
  setpgid(0, 0);
  pid_t group = 0;
  size_t got = 0;
  while (got < sizeof(group)) {
    ssize_t n = read(commands_fd, reinterpret_cast<char*>(&group) + got, sizeof(group) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // no CMD was started
    got += static_cast<size_t>(n);
  }
  char stand_down = 0;
  ssize_t n;
  do {
    n = read(commands_fd, &stand_down, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1 && group > 0) kill(-group, SIGKILL);
  _exit(0);
}

class Runner {
 public:
  explicit Runner(const RunOptions& opts)
      : opts_(opts),
        what_(opts.elect ? "leadership of election '" + opts.name + "'"
                         : "lock '" + opts.name + "'"),
        deadline_(opts.grace_ms) {}
  ~Runner();
  int run();

 private:
  struct Lease {
    Fd sock;
    std::unique_ptr<AcquireResponseParser> parser;
    StreamEvent grant;
    int64_t granted_at_ms = 0;
  };
  // kSignalled: --elect only, SIGTERM/SIGINT to us (CMD gets it and, after the grace, SIGKILL).
  enum class Stop { kNone, kLost, kCapped, kSignalled };
  /// One request whose answer is an event stream (or a refusal).
  struct StreamRequest {
    std::string text;
    int64_t answer_by_ms = -1;   // -1: no limit
    bool limit_is_wait = false;  // reaching answer_by_ms is --wait running out, not a hung sidecar
    StreamEvent::Type first_event = StreamEvent::Type::kAcquired;
  };

  void say(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  bool setupSignals();
  /// A signal other than SIGCHLD that arrived, or 0. Drains the signalfd.
  std::vector<int> readSignals();
  StatusOr<Fd> connectSidecar();
  /// Returns the exit status on failure, or fills `lease`.
  std::optional<int> acquire(Lease* lease);
  /// One request: nullopt and `lease` filled on a grant, else an exit code. On 409 (`*locked`)
  /// nothing is printed and `retry_in_ms` is the sidecar's hint (-1 if none).
  std::optional<int> acquireOnce(int64_t wait_ms, Lease* lease, bool* locked, int64_t* retry_in_ms);
  /// --elect: campaigns; nullopt and `lease` filled once elected, else an exit code.
  std::optional<int> campaign(Lease* lease);
  /// Sends `request` on a new connection and reads until its first event (then nullopt and
  /// `lease` filled) or a refusal (an exit code; on 409 `*locked` as in acquireOnce).
  std::optional<int> openStream(const StreamRequest& request, Lease* lease, bool* locked,
                                int64_t* retry_in_ms);
  /// Forks the keeper, which outlives us only to SIGKILL CMD's process group if we die first.
  bool startKeeper();
  /// Tells the keeper that CMD's group is gone and waits for it.
  void standDownKeeper();
  std::optional<int> spawn(const Lease& lease);
  int supervise(Lease* lease);
  /// Stops CMD (SIGTERM now, SIGKILL after the grace or at the kill deadline); `resign_in_ms`
  /// (>= 0: a step-down's) brings the SIGKILL before the sidecar's resignation.
  void beginStop(Stop why, const std::string& detail, int64_t resign_in_ms = -1);
  void signalChild(int sig);
  /// Notes CMD's end (leaving it a zombie, see there) and stops, and reaps the orphans of CMD
  /// that were re-parented to us.
  void reapChildren();
  /// After CMD's end: SIGKILLs what it left in its process group and reaps it all.
  void endCommandGroup();
  bool sleepInterruptibly(int64_t ms, int* signal_out);

  const RunOptions& opts_;
  const std::string what_;  // "lock 'x'" or "leadership of election 'x'", for messages
  Fd sigfd_;
  sigset_t blocked_{};
  sigset_t old_mask_{};
  bool mask_changed_ = false;

  int tty_fd_ = -1;  // our controlling terminal when we are its foreground job, else -1
  bool gave_tty_ = false;

  pid_t keeper_ = -1;
  Fd keeper_commands_;  // write end of the keeper's pipe

  pid_t child_ = -1;
  bool child_done_ = false;  // CMD ended; it stays a zombie until endCommandGroup() reaps it
  int child_status_ = 0;

  Stop stop_ = Stop::kNone;
  int64_t stop_at_ms_ = -1;  // when CMD got SIGTERM for the stop
  int64_t kill_at_ms_ = -1;  // when CMD's group gets SIGKILL; -1 none (yet, or any more)
  LeaseDeadline deadline_;
};

Runner::~Runner() {
  standDownKeeper();
  if (gave_tty_ && tty_fd_ >= 0) {
    tcsetpgrp(tty_fd_, getpgrp());  // SIGTTOU is blocked, so this cannot stop us
    gave_tty_ = false;
  }
  if (mask_changed_) sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

void Runner::say(const char* fmt, ...) {
  if (opts_.quiet) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "sidelock run: %s\n", buf);
  fflush(stderr);
}

bool Runner::setupSignals() {
  sigemptyset(&blocked_);
  for (int s : kForwardedSignals) sigaddset(&blocked_, s);
  sigaddset(&blocked_, SIGCHLD);
  sigset_t to_block = blocked_;
  // Taking the terminal back from CMD's process group happens while we are in the background;
  // blocked SIGTTOU keeps tcsetpgrp() from stopping us.
  sigaddset(&to_block, SIGTTOU);
  if (sigprocmask(SIG_BLOCK, &to_block, &old_mask_) != 0) return false;
  mask_changed_ = true;
  sigfd_ = Fd(signalfd(-1, &blocked_, SFD_CLOEXEC | SFD_NONBLOCK));
  return sigfd_.valid();
}

std::vector<int> Runner::readSignals() {
  std::vector<int> out;
  signalfd_siginfo info{};
  while (read(sigfd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGCHLD) {
      reapChildren();
    } else {
      out.push_back(static_cast<int>(info.ssi_signo));
    }
  }
  return out;
}

StatusOr<Fd> Runner::connectSidecar() {
  return cli::connectSidecar(SidecarEndpoint{opts_.socket_path, opts_.host, opts_.port},
                             kConnectTimeoutMs);
}

bool Runner::sleepInterruptibly(int64_t ms, int* signal_out) {
  int64_t until = nowMs() + ms;
  while (nowMs() < until) {
    pollfd p{sigfd_.get(), POLLIN, 0};
    poll(&p, 1, pollTimeout(until));
    for (int s : readSignals()) {
      *signal_out = s;
      return false;
    }
  }
  return true;
}

std::optional<int> Runner::acquireOnce(int64_t wait_ms, Lease* lease, bool* locked,
                                       int64_t* retry_in_ms) {
  AcquireRequest req{opts_.name, opts_.ttl_ms, wait_ms, opts_.max_hold_ms, opts_.token,
                     opts_.health_url, opts_.health_grace_ms};
  return openStream(StreamRequest{buildAcquireRequest(req), nowMs() + wait_ms + kAnswerSlackMs},
                    lease, locked, retry_in_ms);
}

std::optional<int> Runner::campaign(Lease* lease) {
  CampaignRequest req{opts_.name,  opts_.candidate, opts_.value,          opts_.ttl_ms,
                      opts_.token, opts_.health_url, opts_.health_grace_ms};
  // No limit at the sidecar: the candidate waits in line while the connection is open, and
  // closing it (on --wait running out) leaves the line.
  StreamRequest request{buildCampaignRequest(req), opts_.wait_ms ? nowMs() + *opts_.wait_ms : -1,
                        /*limit_is_wait=*/true, StreamEvent::Type::kElected};
  bool locked = false;
  int64_t retry_in_ms = -1;
  std::optional<int> code = openStream(request, lease, &locked, &retry_in_ms);
  if (locked) say("the sidecar refused the campaign for %s (409)", what_.c_str());
  return code;
}

std::optional<int> Runner::openStream(const StreamRequest& request, Lease* lease, bool* locked,
                                      int64_t* retry_in_ms) {
  *locked = false;
  *retry_in_ms = -1;
  StatusOr<Fd> sock = connectSidecar();
  if (!sock.isOk()) {
    say("cannot reach the sidecar at %s: %s", opts_.endpoint().c_str(),
        sock.status().message().c_str());
    return kExitUnavailable;
  }
  const std::string& out = request.text;
  auto parser = std::make_unique<AcquireResponseParser>();
  const int64_t answer_by = request.answer_by_ms;
  const int64_t asked_at = nowMs();
  size_t sent = 0;
  char buf[16 * 1024];
  while (true) {
    pollfd fds[2] = {
        {sigfd_.get(), POLLIN, 0},
        {sock->get(), static_cast<short>(POLLIN | (sent < out.size() ? POLLOUT : 0)), 0}};
    int r = poll(fds, 2, pollTimeout(answer_by));
    if (r < 0 && errno != EINTR) {
      say("poll: %s", strerror(errno));
      return kExitInternal;
    }
    // Closing the connection (on return) withdraws a queued acquire at the sidecar.
    for (int s : readSignals()) {
      say("got %s while waiting for %s; giving up", strsignal(s), what_.c_str());
      return kExitSignalBase + s;
    }
    if (r == 0 && answer_by >= 0 && nowMs() >= answer_by) {
      if (request.limit_is_wait) {
        say("not elected in election '%s' within --wait %lld ms", opts_.name.c_str(),
            static_cast<long long>(answer_by - asked_at));
        return kExitNotAcquired;
      }
      say("the sidecar at %s did not answer within %lld ms", opts_.endpoint().c_str(),
          static_cast<long long>(answer_by - asked_at));
      return kExitUnavailable;
    }
    if (sent < out.size() && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = send(sock->get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        say("sending to the sidecar at %s: %s", opts_.endpoint().c_str(), strerror(errno));
        return kExitUnavailable;
      }
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (!(fds[1].revents & (POLLIN | POLLERR | POLLHUP))) continue;
    ssize_t n = recv(sock->get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    Status st =
        n > 0 ? parser->feed(std::string_view(buf, static_cast<size_t>(n))) : parser->finish();
    if (n < 0) st = unavailable(strerror(errno));
    if (!st.isOk()) {
      bool cut = st.code() == StatusCode::kUnavailable;
      say("%s from the sidecar at %s: %s", cut ? "no answer" : "bad answer",
          opts_.endpoint().c_str(), st.message().c_str());
      return cut ? kExitUnavailable : kExitInternal;
    }
    if (!parser->headComplete()) continue;

    if (parser->isStream()) {
      std::optional<StreamEvent> ev = parser->nextEvent();
      if (!ev) {
        if (parser->messageComplete()) {
          say("the sidecar ended the stream before granting %s", what_.c_str());
          return kExitUnavailable;
        }
        continue;
      }
      if (ev->type != request.first_event) {
        say("unexpected first event '%s' from the sidecar", ev->event.c_str());
        return kExitInternal;
      }
      lease->sock = std::move(*sock);
      lease->grant = std::move(*ev);
      lease->parser = std::move(parser);
      lease->granted_at_ms = nowMs();
      return std::nullopt;
    }
    if (!parser->messageComplete()) continue;

    ErrorBody err = parseErrorBody(parser->body());
    int status = parser->status();
    if (status == 200) {
      // A grant that is not a stream would be a lock nobody holds the connection for.
      say("the sidecar at %s answered without an event stream (does it support hold: stream?)",
          opts_.endpoint().c_str());
      return kExitInternal;
    }
    if (status == 409 || err.error == "locked") {
      *locked = true;
      *retry_in_ms = err.retry_after_ms;
      return kExitNotAcquired;
    }
    int code = exitCodeForRefusal(status, err.error);
    say("the sidecar refused %s: %d %s%s%s", what_.c_str(), status,
        err.error.empty() ? "" : err.error.c_str(), err.message.empty() ? "" : ": ",
        err.message.c_str());
    return code;
  }
}

std::optional<int> Runner::acquire(Lease* lease) {
  const int64_t start = nowMs();
  while (true) {
    int64_t wait_ms = kWaitChunkMs;
    if (opts_.wait_ms) {
      wait_ms = std::min(kWaitChunkMs, std::max<int64_t>(0, start + *opts_.wait_ms - nowMs()));
    }
    int64_t asked_at = nowMs();
    int64_t retry_in_ms = -1;
    bool locked = false;
    std::optional<int> code = acquireOnce(wait_ms, lease, &locked, &retry_in_ms);
    if (!code) return std::nullopt;
    if (!locked) return code;
    // 409 locked: ask again while --wait allows.
    int64_t left = opts_.wait_ms ? start + *opts_.wait_ms - nowMs() : kWaitChunkMs;
    if (left <= 0) {
      say("lock '%s' is held by someone else (waited %lld ms)", opts_.name.c_str(),
          static_cast<long long>(nowMs() - start));
      return kExitNotAcquired;
    }
    // The sidecar normally waits the full wait_ms; if it answered sooner (its own cap), pause so
    // we do not hammer it.
    if (nowMs() - asked_at < wait_ms) {
      int64_t pause = std::clamp<int64_t>(retry_in_ms, 10, 1000);
      int sig = 0;
      if (!sleepInterruptibly(std::min(pause, left), &sig)) {
        say("got %s while waiting for %s; giving up", strsignal(sig), what_.c_str());
        return kExitSignalBase + sig;
      }
    }
  }
}

bool Runner::startKeeper() {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return false;
  Fd commands_read(pipefd[0]);
  Fd commands_write(pipefd[1]);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) keeperMain(commands_read.get());
  keeper_ = pid;
  keeper_commands_ = std::move(commands_write);
  return true;
}

void Runner::standDownKeeper() {
  if (keeper_ <= 0) return;
  ssize_t ignored = write(keeper_commands_.get(), "x", 1);
  (void)ignored;
  keeper_commands_.reset();
  while (waitpid(keeper_, nullptr, 0) < 0 && errno == EINTR) {
  }
  keeper_ = -1;
}

std::optional<int> Runner::spawn(const Lease& lease) {
  // If we are the terminal's foreground job, CMD's process group becomes it, so an interactive
  // CMD can read the terminal and ^C / ^Z reach it directly (as with any shell job).
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (isatty(fd) && tcgetpgrp(fd) == getpgrp()) {
      tty_fd_ = fd;
      break;
    }
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    say("pipe: %s", strerror(errno));
    return kExitInternal;
  }
  Fd exec_err_read(pipefd[0]);
  Fd exec_err_write(pipefd[1]);
  std::vector<char*> argv;
  for (const std::string& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // What CMD is told about the lease, set in the child before exec.
  std::vector<std::pair<const char*, std::string>> env;
  const std::string token = std::to_string(lease.grant.token);
  if (opts_.elect) {
    env = {{"SIDELOCK_ELECTION", opts_.name},
           {"SIDELOCK_CANDIDATE", opts_.candidate},
           {"SIDELOCK_TERM", token},
           // The term is the election's fencing token: a CMD written for locks passes it on.
           {"SIDELOCK_TOKEN", token},
           {"SIDELOCK_OWNER", lease.grant.owner}};
  } else {
    env = {{"SIDELOCK_LOCK", opts_.name},
           {"SIDELOCK_OWNER", lease.grant.owner},
           {"SIDELOCK_TOKEN", token}};
  }
  // Orphans of CMD's come to us instead of init, so endCommandGroup() can wait until they are gone.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) {
    say("fork: %s", strerror(errno));
    return kExitInternal;
  }
  if (pid == 0) {
    // CMD gets its own process group so a loss can stop everything it started, not just the
    // direct child (a `sh -c` wrapper would otherwise leave its children running unlocked).
    setpgid(0, 0);
    // If we are killed, CMD is too (the keeper then SIGKILLs what CMD started). Checked again
    // after setting it: we may have died before. (Exec of a set-uid CMD clears it; the keeper
    // and the inherited connection below still hold.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitSignalBase + SIGKILL);
    // CMD and everything it starts share the lease's connection, as flock(1)'s lock lives with
    // its descriptor: the sidecar sees the connection close, and releases, only once every one
    // of them is gone -- even if we are killed first.
    fcntl(lease.sock.get(), F_SETFD, 0);
    if (tty_fd_ >= 0) tcsetpgrp(tty_fd_, getpid());
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    for (const auto& [key, value] : env) setenv(key, value.c_str(), 1);
    execvp(argv[0], argv.data());
    int e = errno;
    ssize_t ignored = write(exec_err_write.get(), &e, sizeof(e));
    (void)ignored;
    _exit(kExitNotFound);
  }
  child_ = pid;
  // Both sides set the group: whichever runs first wins the race against exec / our signals.
  setpgid(pid, pid);
  ssize_t told = write(keeper_commands_.get(), &pid, sizeof(pid));
  (void)told;  // a keeper that is gone cannot help; CMD's death signal and the connection still do
  if (tty_fd_ >= 0 && tcsetpgrp(tty_fd_, pid) == 0) gave_tty_ = true;
  exec_err_write.reset();
  int e = 0;
  ssize_t n;
  do {
    n = read(exec_err_read.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(e))) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    child_done_ = true;
    say("cannot run %s: %s", opts_.command[0].c_str(), strerror(e));
    return e == ENOENT ? kExitNotFound : kExitCannotExecute;
  }
  return std::nullopt;
}

void Runner::signalChild(int sig) {
  if (child_ <= 0 || child_done_) return;
  if (kill(-child_, sig) != 0) kill(child_, sig);  // the group may not exist yet / any more
}

void Runner::reapChildren() {
  while (child_ > 0 && !child_done_) {
    siginfo_t info{};
    // WNOWAIT: an ended CMD stays a zombie until endCommandGroup(), so its pid -- the id of its
    // process group -- cannot go to a new group before we have killed what CMD left in its own.
    if (waitid(P_PID, child_, &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (info.si_pid == 0) break;
    if (info.si_code != CLD_STOPPED) {
      child_done_ = true;
      break;
    }
    siginfo_t consumed{};
    waitid(P_PID, child_, &consumed, WSTOPPED | WNOHANG);  // the stop is reported once
    int sig = info.si_status;
    bool job_stop = sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    if (gave_tty_ && job_stop) {
      // ^Z stopped CMD: stop ourselves too so the shell sees its job stopped, and resume CMD
      // in the foreground when the shell continues us. The lease stays held meanwhile.
      tcsetpgrp(tty_fd_, getpgrp());
      raise(SIGSTOP);
      tcsetpgrp(tty_fd_, child_);
      kill(-child_, SIGCONT);
    }
  }
  // Orphans CMD left (we are their subreaper) that ended: reap them as they go. CMD itself and
  // the keeper are reaped where they are waited for.
  while (true) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (info.si_pid == 0 || info.si_pid == child_ || info.si_pid == keeper_) return;
    waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

void Runner::endCommandGroup() {
  // Whatever CMD left running in its group would run on without the lock once we release it.
  kill(-child_, SIGKILL);
  const int64_t give_up_at = nowMs() + kReapGroupTimeoutMs;
  while (true) {
    int status = 0;
    pid_t r = waitpid(-child_, &status, WNOHANG);
    if (r == child_) child_status_ = status;
    if (r > 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) break;  // ECHILD: nothing of CMD's group is left among our children
    if (nowMs() >= give_up_at) {
      say("processes of %s's group did not die within %lld ms of SIGKILL; releasing anyway",
          opts_.command[0].c_str(), static_cast<long long>(kReapGroupTimeoutMs));
      break;
    }
    pollfd p{sigfd_.get(), POLLIN, 0};
    poll(&p, 1, pollTimeout(give_up_at));
    signalfd_siginfo drained{};
    while (read(sigfd_.get(), &drained, sizeof(drained)) > 0) {
    }
  }
}

void Runner::beginStop(Stop why, const std::string& detail, int64_t resign_in_ms) {
  const int64_t now = nowMs();
  if (stop_ != Stop::kNone) {
    // Already stopping (on a signal, say) when the lease is lost: no new signals (the SIGKILL is
    // due no later than the kill deadline already), but the exit status says it was lost.
    if (why == Stop::kLost && stop_ == Stop::kSignalled) {
      stop_ = Stop::kLost;
      say("%s lost (%s) while %s was stopping", what_.c_str(), detail.c_str(),
          opts_.command[0].c_str());
    }
    // A step-down still brings the SIGKILL forward: CMD is dead before the sidecar resigns.
    if (const int64_t kill_at = LeaseDeadline::killBeforeResign(now, kill_at_ms_, resign_in_ms);
        kill_at != kill_at_ms_) {
      kill_at_ms_ = kill_at;
      say("%s (%s): SIGKILL to %s in %lld ms", what_.c_str(), detail.c_str(),
          opts_.command[0].c_str(), static_cast<long long>(kill_at_ms_ - now));
    }
    return;
  }
  stop_ = why;
  stop_at_ms_ = now;
  // The SIGKILL time said below is the one used: after a step-down, before the resignation.
  kill_at_ms_ = LeaseDeadline::killBeforeResign(now, deadline_.sigkillAt(now), resign_in_ms);
  std::string what = "lost";
  if (why == Stop::kCapped) {
    // Name the cap that was reached: without --max-hold it is the sidecar's.
    what = opts_.max_hold_ms ? "held for --max-hold " + std::to_string(*opts_.max_hold_ms) + " ms"
                             : "held for the sidecar's maximum hold (locks.max_hold_ms_limit)";
  }
  if (why == Stop::kSignalled) {
    say("%s: passing it on to %s, SIGKILL in %lld ms; resigning after it", detail.c_str(),
        opts_.command[0].c_str(), static_cast<long long>(kill_at_ms_ - now));
    return;
  }
  say("%s %s (%s): sending SIGTERM to %s, SIGKILL in %lld ms", what_.c_str(), what.c_str(),
      detail.c_str(), opts_.command[0].c_str(), static_cast<long long>(kill_at_ms_ - now));
  signalChild(SIGTERM);
}

int Runner::supervise(Lease* lease) {
  // The lease as confirmed by the grant, then by each renewal, at the time we received it: the
  // deadlines count from there (lease_deadline.h). A renewal says what is left of its validity
  // (ttl_ms); one without it (from an older sidecar) restores the granted TTL.
  const int64_t grant_ttl =
      lease->grant.ttl_ms >= 0 ? lease->grant.ttl_ms : opts_.ttl_ms.value_or(-1);
  deadline_.confirmed(lease->granted_at_ms, grant_ttl);
  int64_t last_confirmed_ms = lease->granted_at_ms;

  bool stream_open = true;
  char buf[16 * 1024];
  auto handleEvents = [&] {
    while (std::optional<StreamEvent> ev = lease->parser->nextEvent()) {
      switch (ev->type) {
        case StreamEvent::Type::kRenewed:
          // Once CMD is being stopped, nothing moves its SIGKILL.
          if (stop_ != Stop::kNone) break;
          last_confirmed_ms = nowMs();
          deadline_.confirmed(last_confirmed_ms, ev->ttl_ms >= 0 ? ev->ttl_ms : grant_ttl);
          break;
        case StreamEvent::Type::kLost:
          if (ev->cap_reached) {  // the cap, as planned (normally `capped` stopped CMD already)
            beginStop(Stop::kCapped, "the lease ran out at the cap");
            break;
          }
          beginStop(Stop::kLost,
                    ev->reason.empty() ? "reported by the sidecar" : "sidecar: " + ev->reason);
          break;
        case StreamEvent::Type::kSteppingDown:
          // The sidecar is shutting down: it keeps the lease renewed and resigns (releases, for
          // a lock) when we close the stream or at resign_in_ms / release_in_ms. Stop CMD now,
          // dead before that deadline (less the margin the lease deadline keeps), then close:
          // the next leader (holder) is granted only then.
          beginStop(Stop::kLost, "the sidecar is shutting down and steps down", ev->resign_in_ms);
          break;
        case StreamEvent::Type::kResigned:
          // Not by us (we resign by closing the connection, after CMD): the sidecar is shutting
          // down, or someone resigned with our owner id. The next leader may be elected now.
          beginStop(Stop::kLost, "resigned by the sidecar (shutting down?) or with our owner id");
          break;
        case StreamEvent::Type::kCapped:
          // The sidecar stopped renewing; the lease has at most one TTL left. Stopping CMD now
          // gives it that time to finish cleanly while it still holds the lock.
          beginStop(Stop::kCapped, "the sidecar stopped renewing at the cap");
          break;
        default:
          break;  // events we do not know are informational by contract
      }
    }
  };
  auto readStream = [&](bool final_drain) {
    ssize_t n = recv(lease->sock.get(), buf, sizeof(buf), final_drain ? MSG_DONTWAIT : 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    Status st = n > 0 ? lease->parser->feed(std::string_view(buf, static_cast<size_t>(n)))
                      : Status(unavailable(n == 0 ? "connection closed" : strerror(errno)));
    handleEvents();
    if (!st.isOk() || lease->parser->messageComplete()) {
      stream_open = false;
      std::string why = !st.isOk() ? "connection to the sidecar broken: " + st.message()
                                   : "the sidecar ended the stream";
      beginStop(Stop::kLost, why);
    }
  };

  while (!child_done_) {
    int64_t wake_at = kill_at_ms_;
    if (stop_ == Stop::kNone) wake_at = deadline_.overdueAt();
    pollfd fds[2] = {{sigfd_.get(), POLLIN, 0}, {lease->sock.get(), POLLIN, 0}};
    int r = poll(fds, stream_open ? 2 : 1, pollTimeout(wake_at));
    if (r < 0 && errno != EINTR) {
      say("poll: %s", strerror(errno));
      beginStop(Stop::kLost, "internal error");
    }
    for (int s : readSignals()) {
      signalChild(s);
      // --elect: SIGTERM / SIGINT end the run (CMD got the signal; it has the grace to exit).
      if (opts_.elect && (s == SIGTERM || s == SIGINT)) {
        beginStop(Stop::kSignalled, std::string("got ") + strsignal(s));
      }
    }
    reapChildren();  // a SIGCHLD read above already noted it; this covers a coalesced one
    if (child_done_) break;
    if (stream_open && r > 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP))) {
      readStream(false);
    }
    int64_t now = nowMs();
    if (stop_ == Stop::kNone && deadline_.known() && now >= deadline_.overdueAt()) {
      beginStop(Stop::kLost, "no renewal from the sidecar for " +
                                 std::to_string(now - last_confirmed_ms) +
                                 " ms; the lease may expire " +
                                 std::to_string(deadline_.expiresAt() - now) + " ms from now");
    }
    if (kill_at_ms_ >= 0 && now >= kill_at_ms_) {
      say("%s did not exit within %lld ms of SIGTERM (%s): sending SIGKILL",
          opts_.command[0].c_str(), static_cast<long long>(now - stop_at_ms_),
          kill_at_ms_ < stop_at_ms_ + opts_.grace_ms
              ? "the kill deadline, before the lease can expire"
              : "--grace");
      signalChild(SIGKILL);
      kill_at_ms_ = -1;
    }
  }

  // CMD is done. A loss that raced with its end still means it did not hold the lock to the end.
  if (stop_ == Stop::kNone && stream_open) readStream(true);
  if (stop_ == Stop::kNone && deadline_.known() && nowMs() >= deadline_.killBy()) {
    stop_ = Stop::kLost;
    say("%s may have expired before %s finished (no renewal from the sidecar)", what_.c_str(),
        opts_.command[0].c_str());
  }
  endCommandGroup();
  // Closing the connection releases the lock (resigns, with --elect) at the sidecar (nothing of
  // CMD's holds it now but processes that left CMD's process group, see README).
  lease->sock.reset();
  if (stop_ == Stop::kLost) return opts_.elect ? kExitLeadershipLost : kExitLockLost;
  if (stop_ == Stop::kCapped) return kExitMaxHold;
  return exitCodeFromWaitStatus(child_status_);
}

int Runner::run() {
  if (!setupSignals()) {
    say("cannot set up signal handling: %s", strerror(errno));
    return kExitInternal;
  }
  Lease lease;
  if (std::optional<int> code = opts_.elect ? campaign(&lease) : acquire(&lease)) return *code;
  if (!startKeeper()) {
    say("cannot start the keeper process: %s", strerror(errno));
    return kExitInternal;
  }
  if (std::optional<int> code = spawn(lease)) return *code;
  return supervise(&lease);
}

}  // namespace

int runWithOptions(const RunOptions& options) {
  Runner runner(options);
  return runner.run();
}

int runCommand(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  StatusOr<RunOptions> opts = parseRunArgs(args, RunEnvironment::system());
  if (!opts.isOk()) {
    fprintf(stderr,
            "sidelock run: %s\n"
            "Usage: sidelock run [OPTIONS] {NAME | --elect NAME} [--] CMD [ARGS...]  (sidelock "
            "run --help)\n",
            opts.status().message().c_str());
    return kExitUsage;
  }
  if (opts->help) {
    fputs(runUsage().c_str(), stdout);
    return 0;
  }
  return runWithOptions(*opts);
}

}  // namespace sidelock::cli
