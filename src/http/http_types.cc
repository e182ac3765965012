#include "http/http_types.h"

namespace sidelock::http {

std::string PeerIdentity::key() const {
  switch (transport) {
    case Transport::kUnix:
      return has_credentials ? "uid:" + std::to_string(uid) : std::string();
    case Transport::kTcp:
      return address.empty() ? std::string() : "ip:" + address;
    case Transport::kUnknown:
      break;
  }
  return {};
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view Request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

std::string_view Request::param(std::string_view name) const {
  for (const auto& [key, value] : params) {
    if (key == name) return value;
  }
  return {};
}

void Request::clear() {
  method.clear();
  path.clear();
  query.clear();
  raw_path.clear();
  headers.clear();
  body.clear();
  params.clear();
  route = {};
  received_us = 0;
  loop_turn = 0;
  peer.reset();
  principal.reset();
  decoded_body = nullptr;
  routed_handler = nullptr;
  routed_pattern = {};
}

}  // namespace sidelock::http
