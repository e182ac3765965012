#include "api/idempotency_cache.h"

#include <malloc.h>

#include <algorithm>

namespace sidelock::api {
namespace {

// After this many bytes of answers expired, or when the last one did, the freed memory is handed
// back to the kernel (malloc_trim): the entries were allocated in a burst, interleaved with
// everything else the requests allocated, and glibc keeps such holes mapped otherwise.
// (Answers dropped to make room for new ones are not counted: their memory is reused at once.)
constexpr size_t kTrimAfterBytes = 4u << 20;
// The map's buckets are sized anew when it holds under a quarter of its peak (and the peak was
// worth it): a burst must not leave an array for 100,000 entries behind.
constexpr size_t kShrinkMinPeak = 1024;

}  // namespace

std::string IdempotencyCache::keyOf(std::string_view route, std::string_view scope,
                                    std::string_view request_id) {
  std::string key;
  key.reserve(route.size() + scope.size() + request_id.size() + 2);
  // NUL never occurs in a route, a lock name or a request id: no two triples share a key.
  key.append(route).push_back('\0');
  key.append(scope).push_back('\0');
  key.append(request_id);
  return key;
}

size_t IdempotencyCache::costOf(const std::string& key, const Answer& answer) {
  size_t bytes =
      kEntryOverheadBytes + 2 * key.capacity() + answer.body.capacity() + answer.owner.capacity();
  for (const auto& [name, value] : answer.headers) bytes += name.capacity() + value.capacity() + 64;
  return bytes;
}

void IdempotencyCache::erase(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void IdempotencyCache::evict(int64_t now_us) {
  while (!order_.empty() && (order_.front().expires_us <= now_us || bytes_ > max_bytes_ ||
                             entries_.size() > max_entries_)) {
    const bool expired = order_.front().expires_us <= now_us;
    auto it = entries_.find(order_.front().key);
    // The key may have been forgotten, or claimed and answered anew since: only the entry this
    // record describes goes.
    if (it != entries_.end() && it->second.id == order_.front().id) {
      if (expired) expired_bytes_ += it->second.bytes;
      erase(it);
    }
    order_.pop_front();
  }
  peak_entries_ = std::max(peak_entries_, entries_.size());
  if (peak_entries_ >= kShrinkMinPeak && entries_.size() < peak_entries_ / 4) {
    entries_.rehash(0);  // libstdc++ sizes the buckets for what is left
    order_.shrink_to_fit();
    peak_entries_ = entries_.size();
  }
  if (expired_bytes_ >= kTrimAfterBytes || (expired_bytes_ > 0 && order_.empty())) {
    expired_bytes_ = 0;
    malloc_trim(0);
  }
}

IdempotencyCache::Lookup IdempotencyCache::begin(const std::string& key, http::ResponderPtr retry,
                                                 int64_t now_us, uint64_t fingerprint) {
  Lookup found;
  if (off()) return found;
  evict(now_us);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.answered && it->second.expires_us <= now_us) {
    erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    Entry entry;
    entry.id = ++next_id_;
    entry.fingerprint = fingerprint;
    entry.bytes = costOf(key, entry.answer);
    bytes_ += entry.bytes;
    found.kind = Lookup::Kind::kRun;
    found.id = entry.id;
    entries_.emplace(key, std::move(entry));
    // Claims are not evicted; answers make room for them.
    evict(now_us);
    return found;
  }
  if (it->second.fingerprint != fingerprint) {
    // Another request under the same request id (a client bug, or a retry that changed its
    // fields): neither the first's answer nor a second action fits it.
    found.kind = Lookup::Kind::kMismatch;
    return found;
  }
  found.id = it->second.id;
  if (it->second.answered) {
    it->second.replayed = true;
    found.kind = Lookup::Kind::kReplay;
    found.answer = &it->second.answer;
    return found;
  }
  found.kind = Lookup::Kind::kAttached;
  // A client whose timeout is shorter than the first attempt retries again and again: only the
  // retries still connected are kept.
  std::erase_if(it->second.retries,
                [](const http::ResponderPtr& r) { return !r->clientConnected(); });
  it->second.retries.push_back(std::move(retry));
  return found;
}

std::vector<http::ResponderPtr> IdempotencyCache::finish(const std::string& key, Id id,
                                                         const Answer* remember, int64_t now_us) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.id != id || it->second.answered) return {};
  std::vector<http::ResponderPtr> retries = std::move(it->second.retries);
  if (remember == nullptr) {
    erase(it);
    return retries;
  }
  Entry& entry = it->second;
  entry.answered = true;
  entry.answer = *remember;
  entry.expires_us = now_us + window_us_;
  bytes_ -= entry.bytes;
  entry.bytes = costOf(key, entry.answer);
  bytes_ += entry.bytes;
  order_.push_back(Expiry{entry.expires_us, id, key});
  evict(now_us);
  return retries;
}

void IdempotencyCache::forget(const std::string& key, Id id) {
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.id == id && it->second.answered) erase(it);
}

bool IdempotencyCache::replayed(const std::string& key, Id id) const {
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.id == id && it->second.replayed;
}

void IdempotencyCache::sweep(int64_t now_us) { evict(now_us); }

int64_t IdempotencyCache::nextExpiryUs() const {
  return order_.empty() ? 0 : order_.front().expires_us;
}

}  // namespace sidelock::api
