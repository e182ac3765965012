// Clients of the election routes' streams (issue 19): a campaign (POST .../campaign, NDJSON events
// read one by one) and an observer (GET .../observe), each on its own connection. Shared by
// tests/integration/election_test.cc and tests/chaos/election_faults_test.cc.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "support/http_client.h"

namespace sidelock::testing {

/// A campaign in progress: its own connection, the request sent, the stream read event by event.
class Campaign {
 public:
  Campaign(int port, const std::string& name, const std::string& candidate, int64_t ttl_ms,
           const std::string& value = "")
      : client_(HttpClient::tcp(port)) {
    nlohmann::json body = {{"candidate", candidate}, {"ttl_ms", ttl_ms}};
    if (!value.empty()) body["value"] = value;
    client_.sendRequest("POST", "/v1/elections/" + name + "/campaign", body.dump());
  }

  /// Waits for the answer's head and its first event ("elected"); nullopt if none in time. An
  /// answer other than 200 comes back as {"status": N, "body": "..."}.
  std::optional<nlohmann::json> elected(int timeout_ms = 10000) {
    if (!head_) {
      head_ = client_.readStreamHead(timeout_ms);
      if (!head_) return std::nullopt;
      if (head_->status != 200) {
        return nlohmann::json{{"status", head_->status}, {"body", head_->body}};
      }
    }
    return next(timeout_ms);
  }
  /// The next event of the stream, or nullopt (end, close, timeout).
  std::optional<nlohmann::json> next(int timeout_ms = 10000) {
    std::optional<std::string> line = client_.readStreamLine(timeout_ms);
    if (!line) return std::nullopt;
    return nlohmann::json::parse(*line);
  }
  /// Skips "renewed" events until another one comes.
  std::optional<nlohmann::json> nextNotRenewed(int timeout_ms = 10000) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      std::optional<nlohmann::json> e = next(static_cast<int>(std::max<int64_t>(1, left)));
      if (!e || (*e)["event"] != "renewed") return e;
    }
    return std::nullopt;
  }
  void hangUp() { client_.close(); }

 private:
  HttpClient client_;
  std::optional<HttpResponse> head_;
};

/// An observe stream of one election.
class Observer {
 public:
  Observer(int port, const std::string& name) : client_(HttpClient::tcp(port)) {
    client_.sendRequest("GET", "/v1/elections/" + name + "/observe");
    head_ = client_.readStreamHead(10000);
  }
  int status() const { return head_ ? head_->status : 0; }
  std::optional<nlohmann::json> next(int timeout_ms = 10000) {
    std::optional<std::string> line = client_.readStreamLine(timeout_ms);
    if (!line) return std::nullopt;
    return nlohmann::json::parse(*line);
  }

 private:
  HttpClient client_;
  std::optional<HttpResponse> head_;
};

}  // namespace sidelock::testing
