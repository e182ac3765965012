// libFuzzer target: bytes -> the JSON body readers of the lock routes (acquire, release, extend),
// read the way LockApi reads them. A crash, a sanitizer report or a broken invariant (a trap) is
// a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "api/request_body.h"

namespace {

using sidelock::api::BodyField;
using sidelock::api::RequestBody;

void check(bool invariant) {
  if (!invariant) __builtin_trap();
}

void readAll(RequestBody& body) {
  int64_t n = 0;
  bool flag = false;
  std::string_view text;
  for (BodyField f : {BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kMaxHoldMs}) {
    const int64_t before = n;
    if (body.readInt(f, 1, 3'600'000, n)) {
      check(n == before || (n >= 1 && n <= 3'600'000));
    }
  }
  body.readBool(BodyField::kAutoRenew, flag);
  body.readString(BodyField::kOwner, text);
  body.readString(BodyField::kHold, text);
  body.readString(BodyField::kMode, text);
  std::vector<std::string_view> names;
  if (body.readStrings(BodyField::kNames, 64, names)) {
    check(names.empty() || (names.size() >= 1 && names.size() <= 64));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks the route's field set and the Content-Type.
  static constexpr std::string_view kContentTypes[] = {
      "application/json", "", "application/json; charset=utf-8", "text/plain", "Application/JSON"};
  const std::string_view content_type = kContentTypes[(data[0] >> 2) % 5];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  // One body object for every route and input, as LockApi reuses it between requests.
  static RequestBody body;
  bool parsed = false;
  switch (data[0] % 4) {
    case 0:
      parsed = body.parse(content_type, text,
                          {BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kOwner,
                           BodyField::kAutoRenew, BodyField::kMaxHoldMs, BodyField::kHold});
      break;
    case 1:
      parsed = body.parse(content_type, text, {BodyField::kOwner});
      break;
    case 2:  // multi-locks and read/write locks: an array of strings, a mode
      parsed =
          body.parse(content_type, text,
                     {BodyField::kNames, BodyField::kOwner, BodyField::kMode, BodyField::kTtlMs});
      break;
    default:
      parsed = body.parse(content_type, text, {BodyField::kOwner, BodyField::kTtlMs});
      break;
  }
  check(parsed == body.ok());
  check(parsed || !body.error().empty());
  if (parsed) readAll(body);
  return 0;
}
