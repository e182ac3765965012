// GET /v1/locks/{name}/events: the NDJSON stream of a lock's changes (LockEvents).
#include <string>
#include <string_view>

#include "api/lock_api.h"
#include "api/route_helpers.h"

namespace sidelock::api {

namespace {

/// Parses the query of the events route: only `extended=true|false`. False on anything else.
bool parseEventsQuery(std::string_view query, bool* extended) {
  *extended = false;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    if (pair == "extended=true") {
      *extended = true;
    } else if (pair != "extended=false") {
      return false;
    }
  }
  return true;
}

}  // namespace

void LockApi::events(http::Request& req, http::ResponderPtr res) {
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  bool extended = false;
  if (!parseEventsQuery(req.query, &extended)) {
    return sendError(res, 400, "bad_request",
                     "the only query parameter of /events is extended=true|false");
  }
  if (events_->count() >= static_cast<size_t>(locks_.max_event_streams)) {
    return sendError(res, 429, "too_many_streams",
                     "locks.max_event_streams event streams are open on this sidecar");
  }
  events_->add(std::string(req.param("name")), std::move(res), extended);
}

}  // namespace sidelock::api
