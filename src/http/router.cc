#include "http/router.h"

#include "http/http_error.h"

namespace sidelock::http {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "/a/b/c" into {"a","b","c"}; "/" is one empty segment, "/a/" ends with an empty one.
// Writes into `out` (reused by the caller) to keep matching allocation-free for short paths.
void splitPath(std::string_view path, std::vector<std::string_view>* out) {
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

Status Router::add(std::string_view method, std::string_view pattern, Handler handler) {
  if (method.empty()) return invalidArgument("route method is empty");
  if (pattern.empty() || pattern.front() != '/') {
    return invalidArgument("route pattern \"" + std::string(pattern) + "\" must start with '/'");
  }
  Route route;
  route.method = std::string(method);
  route.pattern = std::string(pattern);
  route.handler = std::move(handler);
  std::vector<std::string_view> parts;
  splitPath(pattern, &parts);
  for (std::string_view part : parts) {
    Segment seg;
    if (!part.empty() && part.front() == '{') {
      if (part.back() != '}' || !isValidParamName(part.substr(1, part.size() - 2))) {
        return invalidArgument("route pattern \"" + std::string(pattern) +
                               "\": bad parameter segment \"" + std::string(part) + "\"");
      }
      seg.is_param = true;
      seg.text = std::string(part.substr(1, part.size() - 2));
      for (const Segment& prev : route.segments) {
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
    route.segments.push_back(std::move(seg));
  }
  for (const Route& r : routes_) {
    if (r.method == route.method && r.pattern == route.pattern) {
      return invalidArgument("route " + route.method + " " + route.pattern +
                             " is registered twice");
    }
  }
  routes_.push_back(std::move(route));
  return Status::ok();
}

Router::Match Router::match(std::string_view method, std::string_view raw_path) const {
  Match result;
  thread_local std::vector<std::string_view> parts;
  thread_local std::vector<std::string> decoded;
  splitPath(raw_path, &parts);
  if (parts.empty()) return result;  // not an origin-form path: 404
  decoded.resize(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!percentDecode(parts[i], &decoded[i])) {
      result.kind = Match::Kind::kBadPath;
      return result;
    }
  }

  // HEAD is answered wherever GET is, by the GET handler (the server sends no body for it).
  const bool head = method == "HEAD";
  const Route* best = nullptr;
  for (const Route& r : routes_) {
    if (r.segments.size() != decoded.size()) continue;
    bool path_matches = true;
    for (size_t i = 0; i < decoded.size() && path_matches; ++i) {
      const Segment& seg = r.segments[i];
      path_matches = seg.is_param ? !decoded[i].empty() : seg.text == decoded[i];
    }
    if (!path_matches) continue;
    if (r.method != method && !(head && r.method == "GET")) {
      if (result.kind == Match::Kind::kNoRoute) {
        result.kind = Match::Kind::kWrongMethod;
        result.route = r.pattern;
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
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (best->segments[i].is_param != r.segments[i].is_param) {
        if (!r.segments[i].is_param) best = &r;
        break;
      }
    }
  }
  // No route for this method: result says 404 or 405 (Allow lists every method the path has).
  if (best == nullptr) return result;
  result = Match{};
  result.kind = Match::Kind::kFound;
  result.handler = &best->handler;
  result.route = best->pattern;
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (best->segments[i].is_param) {
      result.params.emplace_back(best->segments[i].text, decoded[i]);  // decoded keeps its capacity
    }
  }
  return result;
}

void Router::dispatch(Request& request, ResponderPtr responder) const {
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
