// A flat JSON object written straight into one string, for the fixed-shape answers of the lock
// routes (no DOM to build and dump per request). Callers list the fields in sorted key order, the
// order nlohmann's dump() of a DOM uses, so the bytes are the same as the DOM answers had.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sidelock::api {

class JsonObject {
 public:
  /// One allocation for the usual answer (a grant with a random owner id is ~90 bytes).
  JsonObject() { out_.reserve(kTypicalSize); }

  JsonObject& text(std::string_view key, std::string_view value);
  JsonObject& integer(std::string_view key, int64_t value);
  JsonObject& unsignedInteger(std::string_view key, uint64_t value);
  JsonObject& boolean(std::string_view key, bool value);
  /// `value` is JSON already (an array or object another builder wrote), appended as it is.
  JsonObject& json(std::string_view key, std::string_view value);
  /// The object without the answer's "\n", to nest in another answer; the builder is spent.
  std::string finishNested();
  /// The object followed by "\n", as every answer of the API ends; the builder is spent.
  std::string finish();

 private:
  static constexpr size_t kTypicalSize = 128;

  void appendKey(std::string_view key);

  std::string out_ = "{";
};

/// Appends `value` as a JSON string, escaped as nlohmann's dump() escapes it (invalid UTF-8
/// replaced by U+FFFD).
void appendJsonString(std::string& out, std::string_view value);

}  // namespace sidelock::api
