#include "chaos/metrics_watch.h"

#include <chrono>
#include <sstream>

#include "chaos/history.h"
#include "support/http_client.h"

namespace sidelock::testing::chaos {

namespace {

bool isCounterSample(const std::string& series) {
  const std::string name = series.substr(0, series.find('{'));
  for (const char* suffix : {"_total", "_count", "_sum", "_bucket"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::map<std::string, double> scrapeMetrics(int port, int timeout_ms) {
  HttpClient http = HttpClient::tcp(port);
  HttpResponse r = http.request("GET", "/metrics", "", timeout_ms);
  std::map<std::string, double> samples;
  std::istringstream lines(r.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      // "+Inf" / "NaN" samples are not counters we compare
    }
  }
  return samples;
}

MetricsWatch::MetricsWatch(std::vector<int> ports, int interval_ms)
    : ports_(std::move(ports)),
      interval_ms_(interval_ms),
      generation_(ports_.size(), 0),
      last_(ports_.size()) {
  thread_ = std::thread([this] { run(); });
}

MetricsWatch::~MetricsWatch() { finish(); }

void MetricsWatch::forget(int process) {
  std::lock_guard lock(mu_);
  ++generation_.at(static_cast<size_t>(process));
  last_.at(static_cast<size_t>(process)).clear();
}

std::vector<std::string> MetricsWatch::finish() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  return violations_;
}

void MetricsWatch::run() {
  while (!stopping_) {
    for (size_t p = 0; p < ports_.size() && !stopping_; ++p) {
      uint64_t generation;
      {
        std::lock_guard lock(mu_);
        generation = generation_[p];
      }
      std::map<std::string, double> samples;
      try {
        samples = scrapeMetrics(ports_[p], 500);
      } catch (const std::exception&) {
        continue;  // stopped, killed or restarting: nothing to compare
      }
      ++scrapes_;
      std::lock_guard lock(mu_);
      if (generation != generation_[p]) continue;  // answered by the process before a restart
      for (const auto& [series, value] : samples) {
        if (!isCounterSample(series)) continue;
        auto it = last_[p].find(series);
        if (it != last_[p].end() && value < it->second) {
          std::ostringstream out;
          out << "metrics: sidecar " << p << " counter " << series << " went from " << it->second
              << " to " << value;
          violations_.push_back(out.str());
        }
        last_[p][series] = value;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms_));
  }
}

std::vector<std::string> checkGaugesReturnToZero(int port, int process, int64_t timeout_ms) {
  const int64_t deadline = nowUs() + timeout_ms * 1000;
  std::map<std::string, double> samples;
  for (;;) {
    try {
      samples = scrapeMetrics(port);
      if (samples["sidelock_held_locks"] == 0 && samples["sidelock_waiters"] == 0) return {};
    } catch (const std::exception&) {
    }
    if (nowUs() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ostringstream out;
  out << "metrics: sidecar " << process << " still reports held_locks "
      << samples["sidelock_held_locks"] << " waiters " << samples["sidelock_waiters"] << " after "
      << timeout_ms << " ms";
  return {out.str()};
}

}  // namespace sidelock::testing::chaos
