#include "support/sidecar_polling.h"

#include <sys/wait.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

namespace sidelock::testing {

bool pollUntil(const std::function<bool()>& condition, int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool waitUntilServing(pid_t* pid, int port, const std::string& path, int64_t timeout_ms,
                      int64_t step_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      return false;
    }
    try {
      HttpClient c = HttpClient::tcp(port);
      if (c.get(path).status == 200) return true;
    } catch (const std::exception&) {  // not listening yet
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  return false;
}

int queuedWaiters(HttpClient& c, const std::string& name) {
  const nlohmann::json listed = nlohmann::json::parse(c.get("/v1/locks").body, nullptr, false);
  if (!listed.is_object() || !listed.contains("waiters")) return -1;
  for (const auto& w : listed["waiters"]) {
    if (w["name"] == name) return w["waiters"].get<int>();
  }
  return 0;
}

bool waitForWaiters(HttpClient& c, const std::string& name, int n, int64_t timeout_ms) {
  return pollUntil([&] { return queuedWaiters(c, name) == n; }, timeout_ms);
}

int64_t metricValue(const std::string& text, const std::string& series) {
  auto pos = text.find("\n" + series + " ");
  if (pos == std::string::npos) return -1;
  return std::stoll(text.substr(pos + series.size() + 2));
}

}  // namespace sidelock::testing
