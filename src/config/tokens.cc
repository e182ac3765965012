#include "config/tokens.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace sidelock::config {
namespace {

constexpr size_t kMinTokenBytes = 16;  // 96 bits of base64: guessing is not an option
constexpr size_t kMaxTokenBytes = 4096;
constexpr std::string_view kPrefixesKey = "prefixes=";

// RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
bool validToken(std::string_view t) {
  size_t i = 0;
  for (; i < t.size(); ++i) {
    char c = t[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
    if (!ok) break;
  }
  if (i == 0) return false;
  for (; i < t.size(); ++i) {
    if (t[i] != '=') return false;
  }
  return true;
}

// The lock-name alphabet (api::LockApi::validLockName); config cannot depend on the api layer,
// and a prefix outside it could never match a name.
bool validPrefix(std::string_view p) {
  if (p.empty()) return false;
  for (char c : p) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '~';
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string_view> splitWords(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

}  // namespace

StatusOr<std::vector<TokenEntry>> parseTokens(std::string_view text, const std::string& origin) {
  std::vector<TokenEntry> entries;
  std::set<std::string_view> seen;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string_view> words = splitWords(line);
    if (words.empty() || words[0].front() == '#') continue;
    // Never echo the line: it holds a secret.
    const std::string where = origin + " line " + std::to_string(line_no);
    std::string_view token = words[0];
    if (!validToken(token)) {
      return invalidArgument(where + ": a token must be base64/base64url characters (RFC 6750)");
    }
    if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
      return invalidArgument(where + ": a token must be " + std::to_string(kMinTokenBytes) + ".." +
                             std::to_string(kMaxTokenBytes) + " characters long");
    }
    if (!seen.insert(token).second) {
      return invalidArgument(where + ": the same token appears twice");
    }
    TokenEntry entry;
    entry.secret = std::string(token);
    entry.label = where;
    if (words.size() > 2 || (words.size() == 2 && words[1].rfind(kPrefixesKey, 0) != 0)) {
      return invalidArgument(where +
                             ": expected the token alone, or the token and prefixes=a-,b- "
                             "(one token per line)");
    }
    if (words.size() == 2) {
      std::string_view list = words[1].substr(kPrefixesKey.size());
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string_view::npos) comma = list.size();
        std::string_view prefix = list.substr(start, comma - start);
        if (!validPrefix(prefix)) {
          return invalidArgument(where +
                                 ": prefixes must be non-empty and use only the lock-name "
                                 "characters A-Z a-z 0-9 - _ . : @ ~");
        }
        entry.prefixes.emplace_back(prefix);
        start = comma + 1;
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

StatusOr<std::vector<TokenEntry>> loadTokens(const TokenSource& source) {
  std::vector<TokenEntry> all;
  if (!source.file.empty()) {
    const std::string key = source.key + "_file";
    std::ifstream in(source.file);
    if (!in) return invalidArgument(key + ": cannot read \"" + source.file + "\"");
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = parseTokens(text.str(), key);
    if (!parsed.isOk()) return parsed.status();
    all = std::move(*parsed);
  }
  if (!source.env.empty()) {
    const std::string key = source.key + "_env";
    const char* value = getenv(source.env.c_str());
    if (value == nullptr) {
      return invalidArgument(key + ": the environment variable " + source.env + " is not set");
    }
    auto parsed = parseTokens(value, key + " (" + source.env + ")");
    if (!parsed.isOk()) return parsed.status();
    for (auto& e : *parsed) {
      for (const auto& have : all) {
        if (have.secret == e.secret)
          return invalidArgument(e.label + ": the same token appears twice");
      }
      all.push_back(std::move(e));
    }
  }
  if (source.configured() && all.empty()) {
    return invalidArgument(source.key + (source.file.empty() ? "_env" : "_file") +
                           ": no token found (every client would be refused)");
  }
  return all;
}

}  // namespace sidelock::config
