// Method + path routing with whole-segment parameters ("/v1/locks/{name}/acquire"). Pure logic:
// no loop, no sockets. The route table is fixed at start-up, so the matched pattern is a bounded
// metrics label (Request::route).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "http/http_types.h"
#include "http/path_pattern.h"

namespace sidelock::http {

/// The metrics label for requests no route matched (404s, and errors found before routing).
inline constexpr std::string_view kUnmatchedRoute = "unmatched";

class Router {
 public:
  struct Match {
    /// kNoRoute answers 404 not_found, kWrongMethod 405 method_not_allowed, kBadPath 400.
    enum class Kind { kFound, kNoRoute, kWrongMethod, kBadPath };
    Kind kind = Kind::kNoRoute;
    const Handler* handler = nullptr;  // kFound only
    /// The matched pattern; for kWrongMethod the first pattern matching the path;
    /// kUnmatchedRoute otherwise.
    std::string_view route = kUnmatchedRoute;
    /// kWrongMethod: the methods the path supports, "GET, POST" (the Allow header).
    std::string allow;
    /// kFound: decoded parameter values by name.
    std::vector<std::pair<std::string, std::string>> params;
  };

  /// Registers `handler` for `method` on `pattern` (a PathPattern: "/"-separated segments, each a
  /// literal or a whole-segment "{param}"). Errors: those of PathPattern::parse, or the same
  /// (method, pattern) twice.
  Status add(std::string_view method, std::string_view pattern, Handler handler);

  /// Matches a path (percent-encoded, no query string). Segments are split before decoding, so
  /// "%2F" stays inside one segment. A parameter never matches an empty segment. When several
  /// patterns match, the one with a literal at the first differing segment wins
  /// ("/v1/locks/stats" beats "/v1/locks/{name}"). HEAD matches the GET routes (RFC 9110 9.3.2),
  /// and a 405's Allow lists HEAD after GET.
  Match match(std::string_view method, std::string_view raw_path) const;

  /// The route every path of `pattern` reaches: registered for `method` with a pattern of that
  /// shape (the same literals and parameter positions; the parameters' names may differ), and no
  /// other route of that method can match a path this shape matches (each differs from it in a
  /// literal segment, or in the segment count). A gateway that builds such a path from a non-empty
  /// value per parameter may then skip matching it: it sets Request::routed_handler, route and
  /// params (the route's names, the decoded values) itself, and dispatch() gives the same result
  /// as matching. Never for HEAD (it matches GET routes too). Once it has answered, add() refuses
  /// (the answer points into the table).
  struct Exclusive {
    const Handler* handler = nullptr;
    std::string_view route;                // the route's pattern, viewing the table
    std::vector<std::string_view> params;  // the route's parameter names, in path order
  };
  std::optional<Exclusive> exclusiveRoute(std::string_view method, std::string_view pattern) const;

  /// Routes `request` (using raw_path, or path when raw_path is empty): fills route and params
  /// and calls the handler (or its routed_handler, already routed, without matching); otherwise
  /// answers 404 not_found, 405 method_not_allowed (with an Allow header) or 400 bad_request
  /// (malformed percent-encoding), setting route to the label.
  void dispatch(Request& request, ResponderPtr responder) const;

  /// A Handler that dispatches through this router, which must outlive it.
  Handler asHandler() const;

  size_t size() const { return routes_.size(); }

 private:
  struct Route {
    std::string method;
    PathPattern pattern;
    Handler handler;
  };
  std::vector<Route> routes_;
  mutable bool handed_out_ = false;  // exclusiveRoute() answered: add() refuses from then on
};

}  // namespace sidelock::http
