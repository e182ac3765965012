#include "http/path_pattern.h"

#include <algorithm>

namespace sidelock::http {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "/a/b/c" into {"a","b","c"} without decoding; nothing for a path not starting with '/'.
void splitRaw(std::string_view path, std::vector<std::string_view>* out) {
  out->clear();
  if (path.empty() || path.front() != '/') return;
  path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    out->push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
}

bool isValidParamName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool percentDecode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  while (true) {
    // Copy the plain run up to the next escape in one go (most paths have no escape at all).
    const size_t escape = in.find('%');
    out->append(in.substr(0, escape));
    if (escape == std::string_view::npos) return true;
    if (escape + 2 >= in.size()) return false;
    int hi = hexValue(in[escape + 1]);
    int lo = hexValue(in[escape + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    in.remove_prefix(escape + 3);
  }
}

PathSplit splitPath(std::string_view raw_path, std::vector<std::string>* out) {
  thread_local std::vector<std::string_view> parts;
  splitRaw(raw_path, &parts);
  if (parts.empty()) {
    out->clear();
    return PathSplit::kNotOriginForm;
  }
  out->resize(parts.size());  // the strings left keep their capacity
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!percentDecode(parts[i], &(*out)[i])) return PathSplit::kBadEscape;
  }
  return PathSplit::kOk;
}

StatusOr<PathPattern> PathPattern::parse(std::string_view pattern) {
  if (pattern.empty() || pattern.front() != '/') {
    return invalidArgument("route pattern \"" + std::string(pattern) + "\" must start with '/'");
  }
  PathPattern parsed;
  parsed.text_ = std::string(pattern);
  std::vector<std::string_view> parts;
  splitRaw(pattern, &parts);
  for (std::string_view part : parts) {
    Segment seg;
    if (!part.empty() && part.front() == '{') {
      if (part.back() != '}' || !isValidParamName(part.substr(1, part.size() - 2))) {
        return invalidArgument("route pattern \"" + std::string(pattern) +
                               "\": bad parameter segment \"" + std::string(part) + "\"");
      }
      seg.is_param = true;
      seg.text = std::string(part.substr(1, part.size() - 2));
      for (const Segment& prev : parsed.segments_) {
        if (prev.is_param && prev.text == seg.text) {
          return invalidArgument("route pattern \"" + std::string(pattern) + "\": parameter {" +
                                 seg.text + "} appears twice");
        }
      }
    } else {
      if (part.find_first_of("{}") != std::string_view::npos) {
        return invalidArgument("route pattern \"" + std::string(pattern) +
                               "\": a parameter must be a whole segment");
      }
      seg.text = std::string(part);
    }
    parsed.segments_.push_back(std::move(seg));
  }
  return parsed;
}

bool PathPattern::matches(const std::vector<std::string>& segments) const {
  if (segments.size() != segments_.size()) return false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments_[i];
    // A parameter never matches an empty segment ("/v1/elections//ready" names no election).
    if (seg.is_param ? segments[i].empty() : seg.text != segments[i]) return false;
  }
  return true;
}

void PathList::push_back(std::string_view pattern) {
  StatusOr<PathPattern> parsed = PathPattern::parse(pattern);
  if (parsed.isOk()) patterns_.push_back(std::move(*parsed));
}

bool pathIsListed(const PathList& patterns, std::string_view path) {
  if (patterns.patterns().empty()) return false;
  std::vector<std::string> segments;
  if (splitPath(path, &segments) != PathSplit::kOk) return false;
  return std::any_of(patterns.patterns().begin(), patterns.patterns().end(),
                     [&segments](const PathPattern& p) { return p.matches(segments); });
}

}  // namespace sidelock::http
