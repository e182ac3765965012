// The JSON bodies of the lock routes (acquire, release, extend), read with nlohmann's SAX parser
// into one reused set of fields instead of a DOM: the answers to good and bad bodies are the same
// as a DOM would give (same first error, same order of checks), without allocating per request.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_types.h"

namespace sidelock::api {

/// A Content-Type value taken apart (RFC 9110 media-type): type/subtype lowercased, the charset
/// parameter kept as given. `valid` is false when the value does not parse.
struct MediaType {
  bool valid = false;
  std::string type;  // "application/json"
  std::string charset;
};
MediaType parseMediaType(std::string_view header);

/// The fields any lock route accepts; each route allows a subset.
enum class BodyField {
  kTtlMs,
  kWaitMs,
  kOwner,
  kAutoRenew,
  kMaxHoldMs,
  kHold,
  // Dapr's lock API (api/dapr_api.h): its field names, camelCase.
  kResourceId,
  kLockOwner,
  kExpiryInSeconds,
  kRequestId,
  kReentrant,
  kLimit,        // semaphores
  kPermit,       // semaphores: the permit id (an owner id)
  kMode,         // read/write locks: "shared" (readers) or "exclusive" (writers, the default)
  kNames,        // multi-locks: an array of lock names
  kFair,         // fair locks: FIFO across sidecars
  kCandidate,    // elections: who campaigns
  kValue,        // elections: what the leader proclaims
  kHealth,       // health-bound holds: an object {"url", "interval_ms", "failures"}
  kHolder,       // locks: who holds it, a public label (never the owner id)
  kLockDelayMs,  // mutex, fair, reentrant locks: the lock-delay after an involuntary loss
  // A new field goes above this line: kFieldCount counts up to kLockDelayMs.
};

class BodyReader;
class RequestBody;

/// A lock route's body given as fields instead of JSON text: the gRPC gateway's request message
/// (api/grpc_gateway.cc), carried to the route as http::Request::decoded_body. RequestBody reads it
/// exactly as it reads the JSON of the same fields: an integer as the JSON number (non-negative:
/// unsigned, as nlohmann's parser gives it), a field the route does not allow refused with the
/// same "unknown field" error.
class BodyFields final : public http::DecodedBody {
 public:
  void integer(BodyField field, int64_t value);
  void boolean(BodyField field, bool value);
  void text(BodyField field, std::string_view value);
  /// Room for `count` fields: one allocation for a request's fields instead of one per growth.
  void reserve(size_t count) { entries_.reserve(count); }
  bool empty() const { return entries_.empty(); }
  void clear() { entries_.clear(); }

 private:
  friend class RequestBody;
  struct Entry {
    BodyField field;
    enum class Type { kInteger, kBool, kText } type;
    int64_t integer = 0;
    bool boolean = false;
    std::string text;
  };
  std::vector<Entry> entries_;
};

/// One member of a field whose value is an object (kHealth): integers and strings are kept,
/// anything else (or a value nested deeper) is kOther.
struct BodyMember {
  enum class Type { kInteger, kString, kOther };
  std::string name;
  Type type = Type::kOther;
  int64_t integer = 0;
  std::string text;
};

class RequestBody {
 public:
  /// Objects and arrays nested deeper than this stop the parse (no field takes one at all).
  static constexpr int kMaxNestingDepth = 16;

  /// The Content-Type policy: none, or application/json, text/plain or
  /// application/x-www-form-urlencoded (curl -d's default), each case-insensitive with parameters
  /// allowed; a charset, if given, must be UTF-8. The body is read as JSON in every case.
  static bool acceptsContentType(std::string_view content_type);

  /// Reads `text` (sent with `content_type`, "" if none): a blank body is an empty object. Fields
  /// outside `allowed` are refused. Returns false with error() set on the first problem.
  bool parse(std::string_view content_type, std::string_view text,
             std::initializer_list<BodyField> allowed);
  /// The request's body: its decoded_body when a gateway gave one (a BodyFields), else its JSON
  /// text (`body`, with its Content-Type) as above.
  bool parse(const http::Request& request, std::initializer_list<BodyField> allowed);

  bool has(BodyField field) const { return slot(field).kind != Kind::kAbsent; }

  /// Each reader leaves `out` alone when the field is absent and returns false (with error() set)
  /// when its value is of the wrong type or out of range.
  bool readInt(BodyField field, int64_t min, int64_t max, int64_t& out);
  bool readBool(BodyField field, bool& out);
  /// `out` views this body's copy of the string: valid until the next parse().
  bool readString(BodyField field, std::string_view& out);
  /// An array of 1..max_items strings (views valid until the next parse()).
  bool readStrings(BodyField field, size_t max_items, std::vector<std::string_view>& out);

  /// An object's members, in order (duplicates kept: the caller refuses them).
  bool readObject(BodyField field, std::vector<BodyMember>& out);

  /// A hash of every field given except request_id (a multi-lock's names in any order): a retry
  /// of a request_id must send the same request (IdempotencyCache refuses another one under it).
  uint64_t fingerprint() const;

  /// Fields outside `allowed` are skipped instead of refused, from the next parse on (Dapr's
  /// routes: Dapr's runtime reads its bodies as Go's encoding/json does, ignoring unknown fields).
  void ignoreUnknownFields() { ignore_unknown_ = true; }

  /// Records a problem found by the caller (the first one wins).
  void setError(std::string message) { fail(kBadRequest, std::move(message)); }

  bool ok() const { return error_.empty(); }
  /// "bad_request", or "unsupported_media_type" for a body that is not JSON by its Content-Type.
  std::string_view errorCode() const { return error_code_; }
  const std::string& error() const { return error_; }

 private:
  friend class BodyReader;
  // kHugeInteger: an integer literal beyond 64 bits (out of range for every field).
  // kStrings: an array whose elements are all strings (anything else in it makes it kOther).
  enum class Kind {
    kAbsent,
    kInteger,
    kUnsigned,
    kHugeInteger,
    kFloat,
    kBool,
    kString,
    kStrings,
    kObject,
    kOther
  };
  struct Value {
    Kind kind = Kind::kAbsent;
    int64_t integer = 0;
    uint64_t unsigned_integer = 0;
    bool boolean = false;
    std::string text;                // kept between requests: its capacity is reused
    std::vector<std::string> items;  // kStrings
    std::vector<BodyMember> members;  // kObject
  };
  static constexpr std::string_view kBadRequest = "bad_request";
  static constexpr size_t kFieldCount = static_cast<size_t>(BodyField::kLockDelayMs) + 1;

  Value& slot(BodyField field) { return values_[static_cast<size_t>(field)]; }
  const Value& slot(BodyField field) const { return values_[static_cast<size_t>(field)]; }
  static std::string_view fieldName(BodyField field);
  bool fail(std::string_view code, std::string message);
  bool failParse(const BodyReader& reader);
  bool read(const BodyFields& fields, std::initializer_list<BodyField> allowed);

  std::array<Value, kFieldCount> values_;
  std::string_view error_code_;
  std::string error_;
  bool ignore_unknown_ = false;
};

}  // namespace sidelock::api
