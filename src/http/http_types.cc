#include "http/http_types.h"

namespace sidelock::http {

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
  principal.reset();
}

}  // namespace sidelock::http
