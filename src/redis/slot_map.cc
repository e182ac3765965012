#include "redis/slot_map.h"

#include <array>
#include <charconv>
#include <set>

namespace sidelock::backend {
namespace {

// CRC16-XMODEM (polynomial 0x1021, initial value 0): the checksum the cluster specification
// names for key slots. The table is built at compile time.
constexpr std::array<uint16_t, 256> makeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16Table = makeCrc16Table();

uint16_t crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

bool parseInt(std::string_view text, int* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string addressText(const config::RedisNodeAddress& a) { return a.toString(); }

}  // namespace

uint16_t clusterKeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) % kClusterSlots;
}

bool parseClusterRedirect(std::string_view error, ClusterRedirect* out) {
  ClusterRedirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = ClusterRedirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = ClusterRedirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return false;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return false;
  int slot = 0;
  if (!parseInt(error.substr(0, space), &slot) || slot < 0 || slot >= kClusterSlots) return false;
  const std::string_view endpoint = error.substr(space + 1);
  const size_t colon = endpoint.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos || !parseInt(endpoint.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return false;
  }
  r.slot = static_cast<uint16_t>(slot);
  r.target.host = std::string(endpoint.substr(0, colon));
  r.target.port = port;
  *out = std::move(r);
  return true;
}

SlotMap::SlotMap() : owner_(kClusterSlots, -1) {}

StatusOr<SlotMap> SlotMap::fromClusterSlots(const RedisValue& reply,
                                            const config::RedisNodeAddress& asked) {
  using Type = RedisValue::Type;
  if (reply.isError()) return internalError("CLUSTER SLOTS failed: " + reply.str);
  if (reply.type != Type::kArray) return internalError("CLUSTER SLOTS: not an array");
  SlotMap map;
  for (const RedisValue& range : reply.elements) {
    // [first slot, last slot, [master host, port, id, ...], replicas...]
    if (range.type != Type::kArray || range.elements.size() < 3 ||
        range.elements[0].type != Type::kInteger || range.elements[1].type != Type::kInteger ||
        range.elements[2].type != Type::kArray || range.elements[2].elements.size() < 2) {
      return internalError("CLUSTER SLOTS: malformed slot range");
    }
    const int64_t first = range.elements[0].integer;
    const int64_t last = range.elements[1].integer;
    const RedisValue& host = range.elements[2].elements[0];
    const RedisValue& port = range.elements[2].elements[1];
    if (first < 0 || last >= kClusterSlots || first > last || port.type != Type::kInteger ||
        port.integer <= 0 || port.integer > 65535 ||
        (host.type != Type::kString && host.type != Type::kNil)) {
      return internalError("CLUSTER SLOTS: malformed slot range");
    }
    config::RedisNodeAddress master;
    // An empty or "?" endpoint means "the host you asked" (cluster-preferred-endpoint-type).
    master.host =
        host.type == Type::kString && !host.str.empty() && host.str != "?" ? host.str : asked.host;
    master.port = static_cast<int>(port.integer);
    const int index = map.indexOf(master);
    for (int64_t slot = first; slot <= last; ++slot) {
      map.owner_[static_cast<size_t>(slot)] = static_cast<int16_t>(index);
    }
  }
  return map;
}

int SlotMap::indexOf(const config::RedisNodeAddress& master) {
  const std::string text = addressText(master);
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (addressText(masters_[i]) == text) return static_cast<int>(i);
  }
  masters_.push_back(master);
  return static_cast<int>(masters_.size() - 1);
}

const config::RedisNodeAddress* SlotMap::masterOf(uint16_t slot) const {
  if (slot >= kClusterSlots) return nullptr;
  const int16_t index = owner_[slot];
  return index < 0 ? nullptr : &masters_[static_cast<size_t>(index)];
}

bool SlotMap::assign(uint16_t slot, const config::RedisNodeAddress& master) {
  if (slot >= kClusterSlots) return false;
  const int16_t index = static_cast<int16_t>(indexOf(master));
  if (owner_[slot] == index) return false;
  owner_[slot] = index;
  return true;
}

std::vector<config::RedisNodeAddress> SlotMap::masters() const {
  std::vector<config::RedisNodeAddress> out;
  std::set<int16_t> seen;
  for (int16_t index : owner_) {
    if (index >= 0 && seen.insert(index).second)
      out.push_back(masters_[static_cast<size_t>(index)]);
  }
  return out;
}

int SlotMap::assignedSlots() const {
  int n = 0;
  for (int16_t index : owner_) n += index >= 0 ? 1 : 0;
  return n;
}

bool SlotMap::sameAs(const SlotMap& other) const {
  for (size_t slot = 0; slot < owner_.size(); ++slot) {
    const config::RedisNodeAddress* a = masterOf(static_cast<uint16_t>(slot));
    const config::RedisNodeAddress* b = other.masterOf(static_cast<uint16_t>(slot));
    if ((a == nullptr) != (b == nullptr)) return false;
    if (a != nullptr && addressText(*a) != addressText(*b)) return false;
  }
  return true;
}

}  // namespace sidelock::backend
