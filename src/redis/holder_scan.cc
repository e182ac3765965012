#include "redis/holder_scan.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace sidelock::backend {
namespace {

constexpr std::string_view kHolderSuffix = "}:holder";

void appendGlobEscaped(std::string* out, std::string_view text) {
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
}

// One scan in progress: the node being scanned, its cursor, the names so far.
struct ScanState {
  explicit ScanState(event::Scheduler& s) : scheduler(s) {}
  event::Scheduler& scheduler;
  std::vector<std::string> addresses;
  NodeFinder find;
  std::string pattern;
  std::string key_prefix;
  HolderScan scan;
  int64_t timeout_ms = 0;
  int64_t deadline_ms = 0;
  ScanCallback cb;
  size_t node = 0;
  std::string cursor = "0";
  size_t scanned_nodes = 0;  // scanned through
  ScannedNames found;
};

void step(std::shared_ptr<ScanState> s);

void finish(const std::shared_ptr<ScanState>& s) {
  event::Scheduler& scheduler = s->scheduler;
  scheduler.post([s] {
    if (s->scanned_nodes == 0 && !s->addresses.empty() && !s->found.node_errors.empty() &&
        s->found.names.empty() && !s->found.out_of_time) {
      std::string why = "no node could be scanned:";
      for (const std::string& e : s->found.node_errors) why += " " + e + ";";
      why.pop_back();
      return s->cb(Status(StatusCode::kUnavailable, why));
    }
    s->cb(std::move(s->found));
  });
}

void nextNode(const std::shared_ptr<ScanState>& s) {
  ++s->node;
  s->cursor = "0";
  step(s);
}

void onReply(const std::shared_ptr<ScanState>& s, const std::string& address,
             StatusOr<RedisValue> r) {
  if (r.isOk() && r->isError()) r = Status(StatusCode::kInternal, r->str);
  if (r.isOk() && (r->type != RedisValue::Type::kArray || r->elements.size() != 2 ||
                   r->elements[1].type != RedisValue::Type::kArray)) {
    r = Status(StatusCode::kInternal, "SCAN answered an unexpected reply");
  }
  if (!r.isOk()) {
    s->found.node_errors.push_back(address + ": " + r.status().message());
    return nextNode(s);
  }
  for (const RedisValue& key : r->elements[1].elements) {
    std::string name = lockNameOfHolderRecord(s->key_prefix, key.str);
    if (!name.empty()) keepScannedName(&s->found, std::move(name), s->scan.keep);
  }
  s->cursor = r->elements[0].str;
  if (s->cursor == "0") {
    ++s->scanned_nodes;
    return nextNode(s);
  }
  step(s);
}

void step(std::shared_ptr<ScanState> s) {
  if (s->node >= s->addresses.size()) return finish(s);
  if (s->scheduler.nowMs() >= s->deadline_ms) {
    s->found.out_of_time = true;
    return finish(s);
  }
  const std::string& address = s->addresses[s->node];
  RedisNode* node = s->find(address);
  if (node == nullptr) {
    s->found.node_errors.push_back(address + ": no longer a master");
    return nextNode(s);
  }
  const std::string count = std::to_string(std::max<size_t>(s->scan.batch, 1));
  const std::string_view argv[] = {"SCAN", s->cursor, "MATCH", s->pattern, "COUNT", count};
  const int64_t left = std::max<int64_t>(1, s->deadline_ms - s->scheduler.nowMs());
  node->commandArgv(argv, std::min(s->timeout_ms, left),
                    [s, address](StatusOr<RedisValue> r) { onReply(s, address, std::move(r)); });
}

}  // namespace

std::string holderRecordPattern(std::string_view key_prefix, std::string_view name_prefix) {
  std::string p;
  appendGlobEscaped(&p, key_prefix);
  p += "\\{";  // literal braces: no glob meaning in Redis, escaped all the same
  appendGlobEscaped(&p, name_prefix);
  p += "*\\}:holder";
  return p;
}

std::string lockNameOfHolderRecord(std::string_view key_prefix, std::string_view key) {
  const size_t head = key_prefix.size() + 1;
  if (key.size() <= head + kHolderSuffix.size() || key.substr(0, key_prefix.size()) != key_prefix ||
      key[key_prefix.size()] != '{' || !key.ends_with(kHolderSuffix)) {
    return "";
  }
  std::string_view name = key.substr(head, key.size() - head - kHolderSuffix.size());
  if (name.find_first_of("{}") != std::string_view::npos) return "";
  return std::string(name);
}

void scanHolderRecords(event::Scheduler& scheduler, std::vector<std::string> addresses,
                       NodeFinder find, std::string_view key_prefix, const HolderScan& scan,
                       int64_t timeout_ms, ScanCallback cb) {
  auto s = std::make_shared<ScanState>(scheduler);
  s->addresses = std::move(addresses);
  s->find = std::move(find);
  s->pattern = holderRecordPattern(key_prefix, scan.prefix);
  s->key_prefix = std::string(key_prefix);
  s->scan = scan;
  s->timeout_ms = timeout_ms;
  s->deadline_ms = scheduler.nowMs() + scan.budget_ms;
  s->cb = std::move(cb);
  step(std::move(s));
}

}  // namespace sidelock::backend
