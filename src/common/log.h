// Structured, one-line-per-event logging (logfmt or JSON), with levels.
//
//   SL_LOG(kInfo, "lock.granted", {"name", name}, {"token", std::to_string(token)});
//
// Owner ids are capabilities: never log them in clear at info level; use ownerDigest().
#pragma once

#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sidelock {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kLogfmt, kJson };

struct LogField {
  std::string_view key;
  std::string value;
  LogField(std::string_view k, std::string v) : key(k), value(std::move(v)) {}
  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(v) {}
  LogField(std::string_view k, long long v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, unsigned long long v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, long v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, unsigned long v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, int v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, unsigned v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
};

StatusOr<LogLevel> parseLogLevel(std::string_view s);
StatusOr<LogFormat> parseLogFormat(std::string_view s);

/// Process-wide settings; set once at start-up (the loop is single-threaded).
void configureLogging(LogLevel level, LogFormat format, FILE* out = stderr);
bool logEnabled(LogLevel level);
void logEvent(LogLevel level, std::string_view event, std::initializer_list<LogField> fields);
/// Formats one line without writing it (for tests).
std::string formatLogLine(LogFormat format, LogLevel level, std::string_view event,
                          std::initializer_list<LogField> fields);

/// A short, stable, non-reversible digest of an owner id for logs ("o:1f2e3d4c").
std::string ownerDigest(std::string_view owner);

}  // namespace sidelock

#define SL_LOG(level, event, ...)                                                \
  do {                                                                           \
    if (::sidelock::logEnabled(::sidelock::LogLevel::level))                     \
      ::sidelock::logEvent(::sidelock::LogLevel::level, event, {__VA_ARGS__});   \
  } while (0)
