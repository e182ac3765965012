#include "http/router.h"

#include "http/http_error.h"

namespace sidelock::http {
Status Router::add(std::string_view method, std::string_view pattern, Handler handler) {
  if (method.empty()) return invalidArgument("route method is empty");
  if (handed_out_) {
    return invalidArgument("route " + std::string(method) + " " + std::string(pattern) +
                           " added after exclusiveRoute(): the table is fixed by then");
  }
  StatusOr<PathPattern> parsed = PathPattern::parse(pattern);
  if (!parsed.isOk()) return parsed.status();
  for (const Route& r : routes_) {
    if (r.method == method && r.pattern.text() == pattern) {
      return invalidArgument("route " + std::string(method) + " " + std::string(pattern) +
                             " is registered twice");
    }
  }
  routes_.push_back(Route{std::string(method), std::move(parsed).value(), std::move(handler)});
  return Status::ok();
}

Router::Match Router::match(std::string_view method, std::string_view raw_path) const {
  Match result;
  thread_local std::vector<std::string> decoded;
  switch (splitPath(raw_path, &decoded)) {
    case PathSplit::kOk:
      break;
    case PathSplit::kNotOriginForm:
      return result;  // 404
    case PathSplit::kBadEscape:
      result.kind = Match::Kind::kBadPath;
      return result;
  }

  // HEAD is answered wherever GET is, by the GET handler (the server sends no body for it).
  const bool head = method == "HEAD";
  const Route* best = nullptr;
  for (const Route& r : routes_) {
    if (!r.pattern.matches(decoded)) continue;
    if (r.method != method && !(head && r.method == "GET")) {
      if (result.kind == Match::Kind::kNoRoute) {
        result.kind = Match::Kind::kWrongMethod;
        result.route = r.pattern.text();
      }
      // Allow lists each method once, in registration order.
      bool listed = false;
      size_t pos = 0;
      while (pos < result.allow.size()) {
        size_t end = result.allow.find(", ", pos);
        if (end == std::string::npos) end = result.allow.size();
        if (std::string_view(result.allow).substr(pos, end - pos) == r.method) listed = true;
        pos = end + 2;
      }
      if (!listed) {
        if (!result.allow.empty()) result.allow += ", ";
        result.allow += r.method;
        if (r.method == "GET") result.allow += ", HEAD";
      }
      continue;
    }
    if (best == nullptr) {
      best = &r;
      continue;
    }
    // More specific wins: a literal at the first segment where the two patterns differ in kind.
    const auto& best_segments = best->pattern.segments();
    const auto& segments = r.pattern.segments();
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (best_segments[i].is_param != segments[i].is_param) {
        if (!segments[i].is_param) best = &r;
        break;
      }
    }
  }
  // No route for this method: result says 404 or 405 (Allow lists every method the path has).
  if (best == nullptr) return result;
  result = Match{};
  result.kind = Match::Kind::kFound;
  result.handler = &best->handler;
  result.route = best->pattern.text();
  const auto& best_segments = best->pattern.segments();
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (best_segments[i].is_param) {
      result.params.emplace_back(best_segments[i].text, decoded[i]);  // decoded keeps its capacity
    }
  }
  return result;
}

std::optional<Router::Exclusive> Router::exclusiveRoute(std::string_view method,
                                                        std::string_view pattern) const {
  // HEAD matches GET routes too (match()): not a shape one route can own.
  if (method == "HEAD") return std::nullopt;
  StatusOr<PathPattern> shape = PathPattern::parse(pattern);
  if (!shape.isOk()) return std::nullopt;
  const auto& mine = shape->segments();
  // How two patterns of the same length relate: the same shape, or some path matches both
  // (overlap), or none does (a literal in both at one segment, and not the same).
  enum class Relation { kSameShape, kOverlap, kDisjoint };
  auto relate = [&mine](const PathPattern& other) {
    const auto& theirs = other.segments();
    Relation relation = Relation::kSameShape;
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i].is_param != theirs[i].is_param) {
        relation = Relation::kOverlap;
      } else if (!mine[i].is_param && mine[i].text != theirs[i].text) {
        return Relation::kDisjoint;
      }
    }
    return relation;
  };
  const Route* found = nullptr;
  for (const Route& r : routes_) {
    if (r.method != method || r.pattern.segments().size() != mine.size()) continue;
    switch (relate(r.pattern)) {
      case Relation::kDisjoint:
        continue;
      case Relation::kOverlap:
        return std::nullopt;  // some path matches both: the router must choose
      case Relation::kSameShape:
        if (found != nullptr) return std::nullopt;  // cannot happen: add() refuses duplicates
        found = &r;
    }
  }
  if (found == nullptr) return std::nullopt;
  handed_out_ = true;  // the answer points into routes_: no route may be added from now on
  Exclusive exclusive{&found->handler, found->pattern.text(), {}};
  for (const auto& segment : found->pattern.segments()) {
    if (segment.is_param) exclusive.params.push_back(segment.text);
  }
  return exclusive;
}

void Router::dispatch(Request& request, ResponderPtr responder) const {
  if (request.routed_handler != nullptr) {  // routed by its gateway (exclusiveRoute)
    request.route = request.routed_pattern;
    (*request.routed_handler)(request, std::move(responder));
    return;
  }
  std::string_view path = request.raw_path.empty() ? request.path : request.raw_path;
  Match m = match(request.method, path);
  request.route = m.route;
  switch (m.kind) {
    case Match::Kind::kFound:
      request.params = std::move(m.params);
      (*m.handler)(request, std::move(responder));
      return;
    case Match::Kind::kNoRoute:
      sendError(*responder, 404, kNotFound,
                "no route for " + request.method + " " + std::string(path.substr(0, 256)));
      return;
    case Match::Kind::kWrongMethod:
      sendError(*responder, 405, kMethodNotAllowed,
                request.method + " is not allowed here; allowed: " + m.allow, {{"Allow", m.allow}});
      return;
    case Match::Kind::kBadPath:
      sendError(*responder, 400, kBadRequest, "malformed percent-encoding in the path");
      return;
  }
}

Handler Router::asHandler() const {
  return
      [this](Request& request, ResponderPtr responder) { dispatch(request, std::move(responder)); };
}

}  // namespace sidelock::http
