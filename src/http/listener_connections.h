// The connections one listener counts against listen.max_connections and
// listen.max_connections_per_peer, and the admission rule both servers apply (HttpServer for
// HTTP/1.1, Http2Server for gRPC): at a cap, the longest-idle connection (of the peer at its own
// cap, else of the listener) makes room; a newcomer is refused only when none is idle. Each server
// keeps its own connections and says which one is idle (its `evict_longest_idle`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>

namespace sidelock::http {

struct ListenerConnections {
  size_t connections = 0;
  std::unordered_map<std::string, size_t> per_peer;  // only with max_connections_per_peer

  /// `peer_key` is "" when there is no per-peer cap (the peer is not counted then).
  void countIn(const std::string& peer_key) {
    ++connections;
    if (!peer_key.empty()) ++per_peer[peer_key];
  }
  void countOut(const std::string& peer_key) {
    --connections;
    if (peer_key.empty()) return;
    auto it = per_peer.find(peer_key);
    if (it != per_peer.end() && --it->second == 0) per_peer.erase(it);
  }

  /// Whether a connection of `peer_key` fits, after `evict_longest_idle(const std::string*
  /// peer_key_or_null)` closed (and counted out) the longest-idle connection of the peer at its
  /// cap, or of the listener at max_connections; it returns false when none is idle.
  template <typename EvictLongestIdle>
  bool makeRoom(const std::string& peer_key, int max_connections, int max_connections_per_peer,
                EvictLongestIdle&& evict_longest_idle) const {
    const auto max_per_peer = static_cast<size_t>(std::max(0, max_connections_per_peer));
    if (max_per_peer > 0 && !peer_key.empty()) {
      auto it = per_peer.find(peer_key);
      if (it != per_peer.end() && it->second >= max_per_peer && !evict_longest_idle(&peer_key)) {
        return false;
      }
    }
    if (connections >= static_cast<size_t>(std::max(0, max_connections))) {
      return evict_longest_idle(nullptr);
    }
    return true;
  }
};

}  // namespace sidelock::http
