#include "api/request_body.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace sidelock::api {

using nlohmann::json;

/// nlohmann SAX events -> RequestBody values. Only the top level is recorded: a value nested
/// deeper (or an object or array as a field's value) makes its field "of another type". A field
/// given twice is refused (a DOM would silently keep the last one, and two parsers in a chain may
/// disagree on which one counts). Nesting deeper than kMaxNestingDepth stops the parse.
class BodyReader {
 public:
  BodyReader(RequestBody& body, std::initializer_list<BodyField> allowed)
      : body_(body), allowed_(allowed) {}

  /// Why the parse stopped, when the reader (not the JSON grammar) stopped it.
  enum class Stop { kNone, kTooDeep, kDuplicate };

  bool null() { return other(); }
  bool boolean(bool value) {
    if (notAString() || memberOther()) return true;
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kBool;
      v->boolean = value;
    }
    return true;
  }
  bool number_integer(json::number_integer_t value) {
    if (notAString()) return true;
    if (BodyMember* m = member()) {
      m->type = BodyMember::Type::kInteger;
      m->integer = value;
      return true;
    }
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kInteger;
      v->integer = value;
    }
    return true;
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (notAString()) return true;
    if (BodyMember* m = member()) {
      if (value <= static_cast<json::number_unsigned_t>(INT64_MAX)) {
        m->type = BodyMember::Type::kInteger;
        m->integer = static_cast<int64_t>(value);
      }
      return true;
    }
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kUnsigned;
      v->unsigned_integer = value;
    }
    return true;
  }
  bool number_float(json::number_float_t, const json::string_t& literal) {
    if (notAString() || memberOther()) return true;
    if (RequestBody::Value* v = take()) {
      // nlohmann reads an integer too large for 64 bits as a float: it is an out-of-range
      // integer, not a fraction.
      const bool integer_literal = literal.find_first_of(".eE") == json::string_t::npos;
      v->kind = integer_literal ? RequestBody::Kind::kHugeInteger : RequestBody::Kind::kFloat;
    }
    return true;
  }
  bool string(json::string_t& value) {
    if (BodyMember* m = member()) {
      m->type = BodyMember::Type::kString;
      m->text = std::move(value);
      return true;
    }
    if (array_ != nullptr && depth_ == 2) {
      if (array_->kind == RequestBody::Kind::kStrings) array_->items.push_back(std::move(value));
      return true;
    }
    if (RequestBody::Value* v = take()) {
      v->kind = RequestBody::Kind::kString;
      v->text.assign(value);
    }
    return true;
  }
  bool binary(json::binary_t&) { return other(); }
  bool start_object(std::size_t) {
    if (depth_ == 0) top_is_object_ = true;
    notAString();
    if (depth_ == 1 && current_ != nullptr && current_ == objectField()) {
      // The one field that takes an object: its members are kept (one level).
      object_ = std::exchange(current_, nullptr);
      object_->kind = RequestBody::Kind::kObject;
      object_->members.clear();
    }
    return enter();
  }
  bool start_array(std::size_t) {
    notAString();
    if (depth_ == 1 && current_ != nullptr) {
      // A field's array: its string elements are kept (the only arrays fields take).
      array_ = std::exchange(current_, nullptr);
      array_->kind = RequestBody::Kind::kStrings;
      array_->items.clear();
    }
    return enter();
  }
  bool end_object() {
    if (depth_ == 2) object_ = nullptr;
    return leave();
  }
  bool end_array() {
    if (depth_ == 2) array_ = nullptr;
    return leave();
  }
  bool key(json::string_t& name) {
    if (object_ != nullptr && depth_ == 2) {
      object_->members.push_back(BodyMember{name, BodyMember::Type::kOther, 0, {}});
      member_open_ = true;
      return true;
    }
    current_name_.clear();
    if (depth_ != 1) return true;
    for (BodyField field : allowed_) {
      if (name == RequestBody::fieldName(field)) {
        const unsigned bit = 1u << static_cast<unsigned>(field);
        if ((seen_ & bit) != 0) {
          stop_ = Stop::kDuplicate;
          current_name_ = name;
          return false;
        }
        seen_ |= bit;
        current_ = &body_.slot(field);
        current_name_ = name;
        return true;
      }
    }
    // A DOM lists its keys sorted: the first unknown one it would name is the smallest.
    if (!has_unknown_ || name < first_unknown_) first_unknown_ = name;
    has_unknown_ = true;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) {
    error_position_ = position;
    error_message_ = error.what();
    return false;
  }

  bool topIsObject() const { return top_is_object_; }
  /// The top-level value was complete when the parse failed: what failed is trailing data.
  bool topComplete() const { return top_complete_; }
  Stop stop() const { return stop_; }
  /// The allowed field whose value was being read (or the duplicate), "" if none.
  const std::string& currentName() const { return current_name_; }
  size_t errorPosition() const { return error_position_; }
  const std::string& errorMessage() const { return error_message_; }
  bool hasUnknown() const { return has_unknown_; }
  const std::string& firstUnknown() const { return first_unknown_; }

 private:
  /// The slot a top-level value goes to, if its key is an allowed field.
  RequestBody::Value* take() {
    if (depth_ != 1) return nullptr;
    return std::exchange(current_, nullptr);
  }
  /// The member of the object field whose value comes now, if any (taken once).
  BodyMember* member() {
    if (object_ == nullptr || depth_ != 2 || !member_open_) return nullptr;
    member_open_ = false;
    return &object_->members.back();
  }
  /// A member's value of another type (it stays kOther). True when it was a member's value.
  bool memberOther() { return member() != nullptr; }
  RequestBody::Value* objectField() { return &body_.slot(BodyField::kHealth); }
  bool other() {
    if (notAString() || memberOther()) return true;
    if (RequestBody::Value* v = take()) v->kind = RequestBody::Kind::kOther;
    return true;
  }
  /// An element of a field's array that is not a string: the field is of another type. True
  /// when the value was such an element.
  bool notAString() {
    if (array_ == nullptr || depth_ != 2) return false;
    array_->kind = RequestBody::Kind::kOther;
    return true;
  }
  bool enter() {
    other();
    if (++depth_ > RequestBody::kMaxNestingDepth) {
      stop_ = Stop::kTooDeep;
      return false;
    }
    return true;
  }
  bool leave() {
    if (--depth_ == 0) top_complete_ = true;
    return true;
  }

  RequestBody& body_;
  std::initializer_list<BodyField> allowed_;
  int depth_ = 0;
  bool top_is_object_ = false;
  bool top_complete_ = false;
  unsigned seen_ = 0;                    // bit per BodyField
  RequestBody::Value* array_ = nullptr;  // the field whose array is being read
  RequestBody::Value* object_ = nullptr;  // the field whose object is being read
  bool member_open_ = false;              // a member's key was read, its value not yet
  Stop stop_ = Stop::kNone;
  std::string current_name_;
  size_t error_position_ = 0;
  std::string error_message_;
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
    case BodyField::kResourceId:
      return "resourceId";
    case BodyField::kLockOwner:
      return "lockOwner";
    case BodyField::kExpiryInSeconds:
      return "expiryInSeconds";
    case BodyField::kRequestId:
      return "request_id";
    case BodyField::kReentrant:
      return "reentrant";
    case BodyField::kLimit:
      return "limit";
    case BodyField::kPermit:
      return "permit";
    case BodyField::kMode:
      return "mode";
    case BodyField::kNames:
      return "names";
    case BodyField::kFair:
      return "fair";
    case BodyField::kCandidate:
      return "candidate";
    case BodyField::kValue:
      return "value";
    case BodyField::kHealth:
      return "health";
    case BodyField::kHolder:
      return "holder";
    case BodyField::kLockDelayMs:
      return "lock_delay_ms";
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

namespace {

bool isTokenChar(char c) {
  // RFC 9110 tchar.
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

MediaType parseMediaType(std::string_view header) {
  MediaType out;
  std::string_view rest = trimSpaces(header);
  const size_t semicolon = rest.find(';');
  std::string_view type = trimSpaces(rest.substr(0, semicolon));
  const size_t slash = type.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == type.size()) return out;
  for (size_t i = 0; i < type.size(); ++i) {
    if (i != slash && !isTokenChar(type[i])) return out;
  }
  out.type.reserve(type.size());
  for (char c : type) out.type += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  rest = semicolon == std::string_view::npos ? std::string_view() : rest.substr(semicolon + 1);
  // Parameters: name=value or name="quoted value", separated by ';'.
  while (!trimSpaces(rest).empty()) {
    rest = trimSpaces(rest);
    const size_t eq = rest.find('=');
    if (eq == std::string_view::npos) return {};
    const std::string_view name = rest.substr(0, eq);
    for (char c : name) {
      if (!isTokenChar(c)) return {};
    }
    if (name.empty()) return {};
    rest.remove_prefix(eq + 1);
    std::string value;
    if (!rest.empty() && rest.front() == '"') {
      size_t i = 1;
      for (; i < rest.size() && rest[i] != '"'; ++i) {
        if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
        value += rest[i];
      }
      if (i == rest.size()) return {};  // unterminated quote
      rest.remove_prefix(i + 1);
      rest = trimSpaces(rest);
      if (!rest.empty() && rest.front() != ';') return {};
    } else {
      const size_t end = rest.find(';');
      const std::string_view token = trimSpaces(rest.substr(0, end));
      if (token.empty()) return {};
      for (char c : token) {
        if (!isTokenChar(c)) return {};
      }
      value = token;
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    }
    if (!rest.empty()) rest.remove_prefix(1);  // the ';'
    if (equalsIgnoreCase(name, "charset")) out.charset = std::move(value);
  }
  out.valid = true;
  return out;
}

bool RequestBody::acceptsContentType(std::string_view content_type) {
  if (content_type.empty()) return true;
  const MediaType media = parseMediaType(content_type);
  if (!media.valid) return false;
  if (!media.charset.empty() && !equalsIgnoreCase(media.charset, "utf-8")) return false;
  // JSON, and the two types browsers' and curl's defaults send, which are read as JSON too:
  // `curl -d '{...}'` sends application/x-www-form-urlencoded unless told otherwise.
  return media.type == "application/json" || media.type == "text/plain" ||
         media.type == "application/x-www-form-urlencoded";
}

bool RequestBody::parse(std::string_view content_type, std::string_view text,
                        std::initializer_list<BodyField> allowed) {
  for (Value& v : values_) v.kind = Kind::kAbsent;
  error_code_ = {};
  error_.clear();
  if (!text.empty() && !acceptsContentType(content_type)) {
    return fail("unsupported_media_type",
                "request body must be JSON (Content-Type: application/json, charset UTF-8 if "
                "given)");
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return true;
  // nlohmann's lexer takes a NUL byte for the end of the input (for C strings), which would let
  // anything after it through unread. JSON has no place for a raw NUL.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return fail(kBadRequest,
                "request body is not valid JSON: NUL byte at byte " + std::to_string(nul + 1));
  }
  BodyReader reader(*this, allowed);
  if (!json::sax_parse(text.begin(), text.end(), &reader)) {
    return failParse(reader);
  }
  if (!reader.topIsObject()) {
    return fail(kBadRequest, "request body must be a JSON object");
  }
  if (reader.hasUnknown() && !ignore_unknown_) {
    return fail(kBadRequest, "unknown field \"" + reader.firstUnknown() + "\"");
  }
  return true;
}

bool RequestBody::parse(const http::Request& request, std::initializer_list<BodyField> allowed) {
  if (request.decoded_body != nullptr) {
    if (const auto* fields = dynamic_cast<const BodyFields*>(request.decoded_body)) {
      return read(*fields, allowed);
    }
  }
  return parse(request.header("content-type"), request.body, allowed);
}

uint64_t RequestBody::fingerprint() const {
  // FNV-1a over (field, kind, value) of each field given: a change of any of them changes it;
  // collisions only make two different requests look alike, as before there was a check. Left
  // out: wait_ms (the gRPC gateway cuts it to the time left before the call's deadline, so each
  // attempt of one retried call reads another; it does not change what is granted) and fields
  // given at their default (false, "exclusive", "none", a lock_delay_ms of 0: a client library
  // may send them on one attempt and leave them out on the next).
  uint64_t h = 14695981039346656037ULL;
  auto mix = [&h](std::string_view bytes) {
    for (const char c : bytes) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ULL;
    }
  };
  auto mixNumber = [&mix](uint64_t n) {
    mix(std::string_view(reinterpret_cast<const char*>(&n), sizeof n));
  };
  for (size_t i = 0; i < values_.size(); ++i) {
    const Value& v = values_[i];
    const auto field = static_cast<BodyField>(i);
    if (v.kind == Kind::kAbsent || field == BodyField::kRequestId || field == BodyField::kWaitMs) {
      continue;
    }
    const bool at_default =
        (v.kind == Kind::kBool && !v.boolean) ||
        (v.kind == Kind::kString && field == BodyField::kMode && v.text == "exclusive") ||
        (v.kind == Kind::kString && field == BodyField::kHold && v.text == "none") ||
        (v.kind == Kind::kUnsigned && field == BodyField::kLockDelayMs && v.unsigned_integer == 0);
    if (at_default) continue;
    mixNumber(i);
    mixNumber(static_cast<uint64_t>(v.kind));
    switch (v.kind) {
      case Kind::kInteger:
        mixNumber(static_cast<uint64_t>(v.integer));
        break;
      case Kind::kUnsigned:
        mixNumber(v.unsigned_integer);
        break;
      case Kind::kBool:
        mixNumber(v.boolean ? 1 : 0);
        break;
      case Kind::kString:
        mix(v.text);
        mixNumber(v.text.size());
        break;
      case Kind::kStrings: {
        std::vector<std::string_view> items(v.items.begin(), v.items.end());
        std::sort(items.begin(), items.end());
        for (std::string_view item : items) {
          mix(item);
          mixNumber(item.size());
        }
        break;
      }
      case Kind::kObject: {
        // Its members in name order (a client may build the object from an unordered map).
        std::vector<const BodyMember*> members;
        for (const BodyMember& m : v.members) members.push_back(&m);
        std::sort(members.begin(), members.end(),
                  [](const BodyMember* a, const BodyMember* b) { return a->name < b->name; });
        for (const BodyMember* member : members) {
          const BodyMember& m = *member;
          mix(m.name);
          mixNumber(m.name.size());
          mixNumber(static_cast<uint64_t>(m.type));
          mixNumber(static_cast<uint64_t>(m.integer));
          mix(m.text);
          mixNumber(m.text.size());
        }
        break;
      }
      case Kind::kAbsent:
      case Kind::kHugeInteger:
      case Kind::kFloat:
      case Kind::kOther:
        break;  // refused by every reader
    }
  }
  return h;
}

bool RequestBody::read(const BodyFields& fields, std::initializer_list<BodyField> allowed) {
  for (Value& v : values_) v.kind = Kind::kAbsent;
  error_code_ = {};
  error_.clear();
  std::string_view first_unknown;
  for (const BodyFields::Entry& entry : fields.entries_) {
    if (std::find(allowed.begin(), allowed.end(), entry.field) == allowed.end()) {
      // As the JSON reader: the first unknown field in sorted order is named.
      const std::string_view name = fieldName(entry.field);
      if (first_unknown.empty() || name < first_unknown) first_unknown = name;
      continue;
    }
    Value& v = slot(entry.field);
    if (v.kind != Kind::kAbsent) {
      return fail(kBadRequest,
                  "field \"" + std::string(fieldName(entry.field)) + "\" is given twice");
    }
    switch (entry.type) {
      case BodyFields::Entry::Type::kInteger:
        // nlohmann's parser reads a non-negative literal as unsigned, a negative one as signed.
        if (entry.integer >= 0) {
          v.kind = Kind::kUnsigned;
          v.unsigned_integer = static_cast<uint64_t>(entry.integer);
        } else {
          v.kind = Kind::kInteger;
          v.integer = entry.integer;
        }
        break;
      case BodyFields::Entry::Type::kBool:
        v.kind = Kind::kBool;
        v.boolean = entry.boolean;
        break;
      case BodyFields::Entry::Type::kText:
        v.kind = Kind::kString;
        v.text.assign(entry.text);
        break;
    }
  }
  if (!first_unknown.empty() && !ignore_unknown_) {
    return fail(kBadRequest, "unknown field \"" + std::string(first_unknown) + "\"");
  }
  return true;
}

void BodyFields::integer(BodyField field, int64_t value) {
  entries_.push_back(Entry{field, Entry::Type::kInteger, value, false, {}});
}

void BodyFields::boolean(BodyField field, bool value) {
  entries_.push_back(Entry{field, Entry::Type::kBool, 0, value, {}});
}

void BodyFields::text(BodyField field, std::string_view value) {
  entries_.push_back(Entry{field, Entry::Type::kText, 0, false, std::string(value)});
}

bool RequestBody::failParse(const BodyReader& reader) {
  switch (reader.stop()) {
    case BodyReader::Stop::kTooDeep:
      return fail(kBadRequest,
                  "request body nests deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    case BodyReader::Stop::kDuplicate:
      return fail(kBadRequest, "field \"" + reader.currentName() + "\" is given twice");
    case BodyReader::Stop::kNone:
      break;
  }
  const std::string at = " at byte " + std::to_string(reader.errorPosition());
  if (reader.topComplete()) {
    return fail(kBadRequest, "request body is not valid JSON: trailing data after the object" + at);
  }
  // nlohmann names these two in its message; everything else is a plain syntax error.
  const std::string& what = reader.errorMessage();
  if (what.find("UTF-8") != std::string::npos) {
    return fail(kBadRequest, "request body is not valid JSON: invalid UTF-8" + at);
  }
  if (what.find("number overflow") != std::string::npos) {
    if (!reader.currentName().empty()) {
      return fail(kBadRequest, reader.currentName() + " is out of range (number too large)");
    }
    return fail(kBadRequest, "request body is not valid JSON: number too large" + at);
  }
  return fail(kBadRequest, "request body is not valid JSON" + at);
}

bool RequestBody::readInt(BodyField field, int64_t min, int64_t max, int64_t& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kInteger && v.kind != Kind::kUnsigned && v.kind != Kind::kHugeInteger) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be an integer");
  }
  const bool in_range = v.kind == Kind::kHugeInteger ? false
                        : v.kind == Kind::kInteger
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

bool RequestBody::readStrings(BodyField field, size_t max_items,
                              std::vector<std::string_view>& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kStrings || v.items.empty() || v.items.size() > max_items) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be an array of 1.." +
                                 std::to_string(max_items) + " strings");
  }
  out.assign(v.items.begin(), v.items.end());
  return true;
}

bool RequestBody::readObject(BodyField field, std::vector<BodyMember>& out) {
  const Value& v = slot(field);
  if (v.kind == Kind::kAbsent) return true;
  if (v.kind != Kind::kObject) {
    return fail(kBadRequest, std::string(fieldName(field)) + " must be an object");
  }
  out = v.members;
  return true;
}

}  // namespace sidelock::api
