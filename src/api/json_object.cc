#include "api/json_object.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace sidelock::api {

void appendJsonString(std::string& out, std::string_view value) {
  // Lock names and owner ids are printable ASCII, which needs escaping only for '"' and '\'.
  bool plain = true;
  for (unsigned char c : value) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += '"';
    out += value;
    out += '"';
    return;
  }
  out += nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void JsonObject::appendKey(std::string_view key) {
  if (out_.size() > 1) out_ += ',';
  appendJsonString(out_, key);
  out_ += ':';
}

JsonObject& JsonObject::text(std::string_view key, std::string_view value) {
  appendKey(key);
  appendJsonString(out_, value);
  return *this;
}

JsonObject& JsonObject::integer(std::string_view key, int64_t value) {
  appendKey(key);
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof(buf), value).ptr);
  return *this;
}

JsonObject& JsonObject::unsignedInteger(std::string_view key, uint64_t value) {
  appendKey(key);
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof(buf), value).ptr);
  return *this;
}

JsonObject& JsonObject::boolean(std::string_view key, bool value) {
  appendKey(key);
  out_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::json(std::string_view key, std::string_view value) {
  appendKey(key);
  out_ += value;
  return *this;
}

std::string JsonObject::finishNested() {
  out_ += '}';
  return std::move(out_);
}

std::string JsonObject::finish() {
  out_ += "}\n";
  return std::move(out_);
}

}  // namespace sidelock::api
