// Path patterns ("/v1/locks/{name}/acquire"): the one matcher of the Router's routes and of the
// listeners' token-free paths (ListenerPolicy::token_free_paths), so a probe path is listed exactly
// when the router would send it to the route of the same pattern. Pure logic.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sidelock::http {

/// Percent-decodes `in` ("%2F" -> "/"); '+' stays '+' (paths are not form-encoded). False on a
/// malformed escape ("%", "%4", "%zz").
bool percentDecode(std::string_view in, std::string* out);

/// How a path was split into segments (splitPath).
enum class PathSplit { kOk, kNotOriginForm, kBadEscape };

/// Splits a raw (percent-encoded) path into its segments and decodes each: "/a/b%2Fc" ->
/// {"a", "b/c"} (an encoded "/" stays inside its segment); "/" is one empty segment and "/a/"
/// ends with one. `out` is reused by the caller, keeping matching allocation-free once warm.
PathSplit splitPath(std::string_view raw_path, std::vector<std::string>* out);

class PathPattern {
 public:
  struct Segment {
    std::string text;  // literal text, or the parameter's name
    bool is_param = false;
  };

  /// "/"-separated segments, each a literal or a whole-segment "{param}" (letters, digits, '_');
  /// errors: no leading '/', a malformed parameter segment, a parameter named twice.
  static StatusOr<PathPattern> parse(std::string_view pattern);

  /// Whether decoded path segments (splitPath) match: as many segments, each literal equal, each
  /// parameter any non-empty segment.
  bool matches(const std::vector<std::string>& segments) const;

  const std::string& text() const { return text_; }
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  std::string text_;
  std::vector<Segment> segments_;
};

/// Route patterns parsed once, when added (not on each request that is checked against them).
/// A pattern that does not parse is left out: it matches nothing.
class PathList {
 public:
  PathList() = default;
  PathList(std::initializer_list<std::string_view> patterns) {
    for (std::string_view p : patterns) push_back(p);
  }
  void push_back(std::string_view pattern);
  const std::vector<PathPattern>& patterns() const { return patterns_; }

 private:
  std::vector<PathPattern> patterns_;
};

/// Whether raw `path` matches one of `patterns`.
bool pathIsListed(const PathList& patterns, std::string_view path);

}  // namespace sidelock::http
