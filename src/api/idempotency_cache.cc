#include "api/idempotency_cache.h"

namespace sidelock::api {

std::string IdempotencyCache::keyOf(std::string_view route, std::string_view name,
                                    std::string_view request_id) {
  std::string key;
  key.reserve(route.size() + name.size() + request_id.size() + 2);
  // NUL never occurs in a route, a lock name or a request id: no two triples share a key.
  key.append(route).push_back('\0');
  key.append(name).push_back('\0');
  key.append(request_id);
  return key;
}

void IdempotencyCache::expire(int64_t now_us) {
  while (!order_.empty() && (order_.front().first <= now_us || entries_.size() > max_entries_)) {
    auto it = entries_.find(order_.front().second);
    // A key stored again later has a later expiry: only the entry this record describes goes.
    if (it != entries_.end() && it->second.expires_us == order_.front().first) entries_.erase(it);
    order_.pop_front();
  }
}

const IdempotencyCache::Answer* IdempotencyCache::find(std::string_view route,
                                                       std::string_view name,
                                                       std::string_view request_id,
                                                       int64_t now_us) {
  expire(now_us);
  auto it = entries_.find(keyOf(route, name, request_id));
  if (it == entries_.end() || it->second.expires_us <= now_us) return nullptr;
  return &it->second.answer;
}

void IdempotencyCache::store(std::string_view route, std::string_view name,
                             std::string_view request_id, Answer answer, int64_t now_us) {
  if (max_entries_ == 0 || window_us_ <= 0) return;
  std::string key = keyOf(route, name, request_id);
  const int64_t expires = now_us + window_us_;
  entries_[key] = Entry{std::move(answer), expires};
  order_.emplace_back(expires, std::move(key));
  expire(now_us);
}

}  // namespace sidelock::api
