#include "api/request_body.h"

#include <nlohmann/json.hpp>

namespace sidelock::api {

using nlohmann::json;

/// nlohmann SAX events -> RequestBody values. Only the top level is recorded: a value nested
/// deeper (or an object or array as a field's value) makes its field "of another type". A key
/// given twice keeps its last value, as a DOM would.
class BodyReader {
 public:
  BodyReader(RequestBody& body, std::initializer_list<BodyField> allowed)
      : body_(body), allowed_(allowed) {}

  bool null() { return other(); }
  bool boolean(bool value) {
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kBool;
      v->boolean = value;
    }
    return true;
  }
  bool number_integer(json::number_integer_t value) {
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kInteger;
      v->integer = value;
    }
    return true;
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kUnsigned;
      v->unsigned_integer = value;
    }
    return true;
  }
  bool number_float(json::number_float_t, const json::string_t&) {
    if (RequestBody::Value* v = take()) v->kind = RequestBody::Kind::kFloat;
    return true;
  }
  bool string(json::string_t& value) {
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kString;
      v->text.assign(value);
    }
    return true;
  }
  bool binary(json::binary_t&) { return other(); }
  bool start_object(std::size_t) {
    if (depth_ == 0) top_is_object_ = true;
    other();
    ++depth_;
    return true;
  }
  bool start_array(std::size_t) {
    other();
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(json::string_t& name) {
    if (depth_ != 1) return true;
    for (BodyField field : allowed_) {
      if (name == RequestBody::fieldName(field)) {
        current_ = &body_.slot(field);
        return true;
      }
    }
    // A DOM lists its keys sorted: the first unknown one it would name is the smallest.
    if (!has_unknown_ || name < first_unknown_) first_unknown_ = name;
    has_unknown_ = true;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  bool topIsObject() const { return top_is_object_; }
  bool hasUnknown() const { return has_unknown_; }
  const std::string& firstUnknown() const { return first_unknown_; }

 private:
  /// The slot a top-level value goes to, if its key is an allowed field.
  RequestBody::Value* take() {
    if (depth_ != 1) return nullptr;
    return std::exchange(current_, nullptr);
  }
  bool other() {
    if (RequestBody::Value* v = take()) v->kind = RequestBody::Kind::kOther;
    return true;
  }

  RequestBody& body_;
  std::initializer_list<BodyField> allowed_;
  int depth_ = 0;
  bool top_is_object_ = false;
  RequestBody::Value* current_ = nullptr;
  bool has_unknown_ = false;
  std::string first_unknown_;
};

std::string_view RequestBody::fieldName(BodyField field) {
  switch (field) {
    case BodyField::kTtlMs:
      return "ttl_ms";
    case BodyField::kWaitMs:
      return "wait_ms";
    case BodyField::kOwner:
      return "owner";
    case BodyField::kAutoRenew:
      return "auto_renew";
    case BodyField::kMaxHoldMs:
      return "max_hold_ms";
    case BodyField::kHold:
      return "hold";
  }
  return "";
}

bool RequestBody::fail(std::string_view code, std::string message) {
  if (ok()) {
    error_code_ = code;
    error_ = std::move(message);
  }
  return false;
}

bool RequestBody::parse(std::string_view content_type, std::string_view text,
                        std::initializer_list<BodyField> allowed) {
  for (Value& v : values_) v.kind = Kind::kAbsent;
  error_code_ = {};
  error_.clear();
  if (!text.empty() && !content_type.empty() && content_type.substr(0, 16) != "application/json" &&
      content_type.substr(0, 10) != "text/plain" &&
      content_type.substr(0, 33) != "application/x-www-form-urlencoded") {
    // curl -d sends x-www-form-urlencoded by default; we accept it and parse the body as JSON.
    return fail("unsupported_media_type",
                "request body must be JSON (Content-Type: application/json)");
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return true;
  BodyReader reader(*this, allowed);
  if (!json::sax_parse(text.begin(), text.end(), &reader)) {
    return fail(kBadRequest, "request body is not valid JSON");
  }
  if (!reader.topIsObject()) {
    return fail(kBadRequest, "request body must be a JSON object");
  }
  if (reader.hasUnknown()) {
    return fail(kBadRequest, "unknown field \"" + reader.firstUnknown() + "\"");
  }
  return true;
}

bool RequestBody::readInt(BodyField field, int64_t min, int64_t max, int64_t& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kInteger && v.kind != Kind::kUnsigned) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be an integer");
  }
  const bool in_range = v.kind == Kind::kInteger
                            ? v.integer >= min && v.integer <= max
                            : v.unsigned_integer <= static_cast<uint64_t>(INT64_MAX) &&
                                  static_cast<int64_t>(v.unsigned_integer) >= min &&
                                  static_cast<int64_t>(v.unsigned_integer) <= max;
  if (!in_range) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be between " +
                                 std::to_string(min) + " and " + std::to_string(max));
  }
  out = v.kind == Kind::kInteger ? v.integer : static_cast<int64_t>(v.unsigned_integer);
  return true;
}

bool RequestBody::readBool(BodyField field, bool& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kBool) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be true or false");
  }
  out = v.boolean;
  return true;
}

bool RequestBody::readString(BodyField field, std::string_view& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kString) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be a string");
  }
  out = v.text;
  return true;
}

}  // namespace sidelock::api
