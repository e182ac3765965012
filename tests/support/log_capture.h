// Captures what the process logs (SL_LOG) while it lives, for tests that check what is logged and
// how often; restores logging to stderr when it goes, also when an assertion returned early.
// Header-only: it needs sidelock_common, which every test links and the support library does not.
#pragma once

#include <cstdio>
#include <string>

#include "common/log.h"

namespace sidelock::testing {

class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::kInfo) : file_(std::tmpfile()) {
    if (file_ != nullptr) configureLogging(level, LogFormat::kLogfmt, file_);
  }
  ~LogCapture() {
    configureLogging(LogLevel::kInfo, LogFormat::kLogfmt, stderr);
    if (file_ != nullptr) std::fclose(file_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  bool ok() const { return file_ != nullptr; }

  /// Everything logged so far.
  std::string text() const {
    std::string out;
    if (file_ == nullptr) return out;
    std::fflush(file_);
    std::rewind(file_);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), file_)) > 0) out.append(buf, n);
    return out;
  }

  /// How many times `needle` occurs in what was logged.
  int count(const std::string& needle) const {
    const std::string all = text();
    int n = 0;
    for (size_t at = all.find(needle); at != std::string::npos; at = all.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  FILE* file_;
};

}  // namespace sidelock::testing
