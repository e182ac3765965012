#include "backend/memory_backend.h"

#include <utility>

namespace sidelock::backend {
namespace {

/// Remaining time rounded up, so "1 us left" reads as 1 ms held, never 0 (Redis PTTL never
/// reports 0 for a live key either).
int64_t remainingMs(int64_t expiry_us, int64_t now_us) { return (expiry_us - now_us + 999) / 1000; }

Status shutDownError() { return cancelled("memory backend is shut down"); }

}  // namespace

MemoryBackend::MemoryBackend(event::Scheduler& scheduler) : scheduler_(scheduler) {}

MemoryBackend::~MemoryBackend() = default;

void MemoryBackend::deliver(std::function<void()> fn) {
  scheduler_.post([alive = std::weak_ptr<char>(alive_), fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

MemoryBackend::Entry* MemoryBackend::liveEntry(std::string_view name) {
  auto it = locks_.find(name);
  if (it == locks_.end()) return nullptr;
  Entry& e = it->second;
  if (e.owner.empty()) return nullptr;
  if (scheduler_.nowUs() >= e.expiry_us) {
    e.owner.clear();  // lazily expired; the token counter stays
    return nullptr;
  }
  return &e;
}

void MemoryBackend::acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
                            AcquireCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  if (ttl_ms <= 0 || owner.empty()) {
    deliver(
        [cb = std::move(cb)] { cb(invalidArgument("ttl_ms must be > 0 and owner non-empty")); });
    return;
  }
  AcquireReply reply;
  const int64_t now = scheduler_.nowUs();
  if (Entry* held = liveEntry(name)) {
    reply.holder_ttl_ms = remainingMs(held->expiry_us, now);
  } else {
    Entry& e = locks_[std::string(name)];
    e.owner.assign(owner);
    e.expiry_us = now + ttl_ms * 1000;
    e.token += 1;
    reply.granted = true;
    reply.token = e.token;
    reply.validity_ms = ttl_ms;
  }
  deliver([cb = std::move(cb), reply] { cb(reply); });
}

void MemoryBackend::release(std::string_view name, std::string_view owner, OwnerCheckCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  OwnerCheck result = OwnerCheck::kNotHeld;
  if (Entry* held = liveEntry(name)) {
    if (held->owner == owner) {
      held->owner.clear();
      result = OwnerCheck::kOk;
    } else {
      result = OwnerCheck::kNotOwner;
    }
  }
  deliver([cb = std::move(cb), result] { cb(result); });
  if (result == OwnerCheck::kOk) notifyReleased(name);
}

void MemoryBackend::releaseAndGrant(std::string_view name, std::string_view owner,
                                    std::string_view next_owner, int64_t next_ttl_ms,
                                    HandOffCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  if (next_ttl_ms <= 0 || next_owner.empty()) {
    deliver([cb = std::move(cb)] {
      cb(invalidArgument("next ttl_ms must be > 0 and next owner non-empty"));
    });
    return;
  }
  HandOffReply reply;
  if (Entry* held = liveEntry(name)) {
    if (held->owner == owner) {
      held->owner.assign(next_owner);
      held->expiry_us = scheduler_.nowUs() + next_ttl_ms * 1000;
      held->token += 1;
      reply.released = OwnerCheck::kOk;
      reply.next.granted = true;
      reply.next.token = held->token;
      reply.next.validity_ms = next_ttl_ms;
    } else {
      reply.released = OwnerCheck::kNotOwner;
    }
  }
  deliver([cb = std::move(cb), reply] { cb(reply); });
}

void MemoryBackend::extend(std::string_view name, std::string_view owner, int64_t ttl_ms,
                           ExtendCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  if (ttl_ms <= 0) {
    deliver([cb = std::move(cb)] { cb(invalidArgument("ttl_ms must be > 0")); });
    return;
  }
  ExtendReply reply;
  if (Entry* held = liveEntry(name)) {
    if (held->owner == owner) {
      held->expiry_us = scheduler_.nowUs() + ttl_ms * 1000;
      reply.result = OwnerCheck::kOk;
      reply.validity_ms = ttl_ms;
    } else {
      reply.result = OwnerCheck::kNotOwner;
    }
  }
  deliver([cb = std::move(cb), reply] { cb(reply); });
}

void MemoryBackend::inspect(std::string_view name, InspectCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  LockState state;
  if (Entry* held = liveEntry(name)) {
    state.held = true;
    state.ttl_ms = remainingMs(held->expiry_us, scheduler_.nowUs());
    state.token = held->token;
  } else if (auto it = locks_.find(name); it != locks_.end()) {
    state.token = it->second.token;
  }
  deliver([cb = std::move(cb), state] { cb(state); });
}

void MemoryBackend::forceRelease(std::string_view name, ForceReleaseCallback cb) {
  if (shut_down_) {
    deliver([cb = std::move(cb)] { cb(shutDownError()); });
    return;
  }
  ForcedRelease result;
  if (Entry* held = liveEntry(name)) {
    held->owner.clear();
    result = ForcedRelease{true, held->token};
  }
  deliver([cb = std::move(cb), result] { cb(result); });
  if (result.released) notifyReleased(name);
}

void MemoryBackend::watchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it == watches_.end()) {
    watches_.emplace(std::string(name), 1);
  } else {
    ++it->second;
  }
}

void MemoryBackend::unwatchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it == watches_.end()) return;
  if (--it->second <= 0) watches_.erase(it);
}

void MemoryBackend::notifyReleased(std::string_view name) {
  if (!listener_ || watches_.find(name) == watches_.end()) return;
  deliver([this, name = std::string(name)] {
    // Re-check: the watch may have ended (queue emptied) between release and delivery.
    if (listener_ && watches_.find(name) != watches_.end()) listener_(name);
  });
}

void MemoryBackend::forceDelete(std::string_view name) {
  if (Entry* held = liveEntry(name)) held->owner.clear();
}

void MemoryBackend::forceOwner(std::string_view name, std::string_view owner) {
  if (Entry* held = liveEntry(name)) held->owner.assign(owner);
}

BackendHealth MemoryBackend::health() const {
  BackendHealth h;
  h.ready = !shut_down_;
  if (shut_down_) h.reason = "shut down";
  NodeHealth node;
  node.address = "memory";
  node.up = !shut_down_;
  node.reason = h.reason;
  h.nodes.push_back(std::move(node));
  return h;
}

void MemoryBackend::shutdown(std::function<void()> done) {
  shut_down_ = true;
  deliver(std::move(done));
}

}  // namespace sidelock::backend
