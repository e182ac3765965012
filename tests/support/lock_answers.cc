#include "support/lock_answers.h"

#include <nlohmann/json.hpp>

namespace sidelock::testing {

std::string ownerOf(const HttpResponse& r) {
  const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  return body.is_object() && body.contains("owner") && body["owner"].is_string()
             ? body["owner"].get<std::string>()
             : "";
}

int64_t msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

}  // namespace sidelock::testing
