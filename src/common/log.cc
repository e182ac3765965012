#include "common/log.h"

#include <sys/time.h>

#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>

namespace sidelock {
namespace {

LogLevel g_level = LogLevel::kInfo;
LogFormat g_format = LogFormat::kLogfmt;
FILE* g_out = stderr;

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

std::string timestamp() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm utc{};
  gmtime_r(&tv.tv_sec, &utc);
  char buf[40];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &utc);
  snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(tv.tv_usec / 1000));
  return buf;
}

bool needsQuoting(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f) return true;
  }
  return false;
}

void appendLogfmtValue(std::string& out, std::string_view v) {
  if (!needsQuoting(v)) {
    out.append(v);
    return;
  }
  // JSON string escaping is a valid logfmt quoting and handles control bytes.
  out += nlohmann::json(std::string(v)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

}  // namespace

StatusOr<LogLevel> parseLogLevel(std::string_view s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  return invalidArgument("must be one of debug, info, warn, error");
}

StatusOr<LogFormat> parseLogFormat(std::string_view s) {
  if (s == "logfmt") return LogFormat::kLogfmt;
  if (s == "json") return LogFormat::kJson;
  return invalidArgument("must be one of logfmt, json");
}

void configureLogging(LogLevel level, LogFormat format, FILE* out) {
  g_level = level;
  g_format = format;
  g_out = out;
}

bool logEnabled(LogLevel level) { return level >= g_level; }

std::string formatLogLine(LogFormat format, LogLevel level, std::string_view event,
                          std::initializer_list<LogField> fields) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = timestamp();
    j["level"] = levelName(level);
    j["event"] = std::string(event);
    for (const auto& f : fields) j[std::string(f.key)] = f.value;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string out;
  out.reserve(128);
  out += "ts=";
  out += timestamp();
  out += " level=";
  out += levelName(level);
  out += " event=";
  appendLogfmtValue(out, event);
  for (const auto& f : fields) {
    out += ' ';
    out.append(f.key);
    out += '=';
    appendLogfmtValue(out, f.value);
  }
  return out;
}

void logEvent(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) {
  std::string line = formatLogLine(g_format, level, event, fields);
  line += '\n';
  fwrite(line.data(), 1, line.size(), g_out);
  fflush(g_out);
}

std::string ownerDigest(std::string_view owner) {
  // FNV-1a 64: enough to correlate log lines, useless for recovering the owner id.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : owner) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[24];
  snprintf(buf, sizeof(buf), "o:%08llx", static_cast<unsigned long long>(h >> 32));
  return buf;
}

}  // namespace sidelock
