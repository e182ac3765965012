// Dapr's distributed lock API (v1.0-alpha1), so apps written for Dapr switch to sidelock without
// code changes:
//   POST /v1.0-alpha1/lock/{store}    {"resourceId","lockOwner","expiryInSeconds"} -> {"success"}
//   POST /v1.0-alpha1/unlock/{store}  {"resourceId","lockOwner"} -> {"status": 0|1|2|3}
//   GET /v1.0/metadata                {"id","runtimeVersion","components":[...],...}
//   GET /v1.0/healthz, /v1.0/healthz/outbound   204 when ready (as /readyz), 500 otherwise
// Errors have Dapr's shape: {"errorCode": "ERR_...", "message": "..."}. Dapr SDKs poll
// /v1.0/metadata before their first call, so without it they never send one.
//
// The lock is the sidecar lock named resourceId (so Dapr and v1 clients of one resource exclude
// each other). Dapr lets the client choose lockOwner, while a sidecar owner id is a secret: the
// owner id is derived as HMAC-SHA256(dapr owner secret, resourceId NUL lockOwner), so unlock
// needs the same lockOwner, works across sidecars that share the secret and across restarts
// when the secret is configured, and nobody can release a lock without knowing its lockOwner.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/lock_api.h"
#include "api/request_body.h"
#include "config/config.h"
#include "lock/lock_service.h"

namespace sidelock::api {

class DaprApi {
 public:
  /// Why the sidecar is not ready ("" when it is): what /readyz answers, read by the health
  /// routes (LockApi::notReadyReason).
  using NotReadyReason = std::function<std::string()>;

  /// `dapr.owner_secret` empty: a random secret for this process.
  DaprApi(const config::DaprConfig& dapr, const config::LocksConfig& locks,
          lock::LockService& service, NotReadyReason not_ready_reason);

  /// The lock, metadata and health routes, or none when dapr.enabled is false.
  std::vector<Route> routes();
  /// The sidecar's identity (config `identity`): the holder recorded for Dapr's locks (Dapr's
  /// request names none; its lockOwner proves the lease and is never shown).
  void setIdentity(std::string identity) { identity_ = std::move(identity); }

  /// The sidecar owner id for a Dapr (resourceId, lockOwner): 32 hex digits of the HMAC.
  std::string ownerFor(std::string_view resource_id, std::string_view lock_owner) const;

  /// The lock a Dapr resourceId names. Dapr apps use '/' in resource ids ("orders/42"), which no
  /// lock name has (it would be a path separator in the v1 routes): each '/' becomes '~'.
  /// resourceIds may not contain '~' themselves, so the mapping is injective, and every other
  /// resourceId is its own lock name (Dapr and v1 clients of one resource exclude each other).
  static std::string lockNameOfResource(std::string_view resource_id);

 private:
  void lock(http::Request& req, http::ResponderPtr res);
  void unlock(http::Request& req, http::ResponderPtr res);
  void metadata(http::Request& req, http::ResponderPtr res);
  /// /v1.0/healthz and /v1.0/healthz/outbound: `error_code` is Dapr's code of the 500 answer.
  void health(std::string_view error_code, http::ResponderPtr res);
  /// Store accepted, body parsed, resourceId naming a valid lock (`*lock_name`) the token may
  /// use, lockOwner set; otherwise answers the Dapr error and returns false.
  bool readCommon(http::Request& req, const http::ResponderPtr& res,
                  std::initializer_list<BodyField> fields, std::string_view* resource_id,
                  std::string_view* lock_owner, std::string* lock_name);

  const config::DaprConfig& dapr_;
  const config::LocksConfig& locks_;
  lock::LockService& service_;
  NotReadyReason not_ready_reason_;
  std::string secret_;
  std::string identity_;
  RequestBody body_;
};

}  // namespace sidelock::api
