#include "api/dapr_api.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "api/json_object.h"
#include "api/route_helpers.h"
#include "common/log.h"
#include "common/random.h"

namespace sidelock::api {
namespace {

constexpr size_t kMaxLockOwnerBytes = 1024;

// Dapr's error codes (dapr/dapr pkg/messages) for what can go wrong here.
constexpr std::string_view kMalformed = "ERR_MALFORMED_REQUEST";
constexpr std::string_view kStoreNotFound = "ERR_LOCK_STORE_NOT_FOUND";
constexpr std::string_view kTryLockFailed = "ERR_TRY_LOCK";
constexpr std::string_view kUnlockFailed = "ERR_UNLOCK";
constexpr std::string_view kPermissionDenied = "ERR_PERMISSION_DENIED";
constexpr std::string_view kHealthNotReady = "ERR_HEALTH_NOT_READY";
constexpr std::string_view kOutboundNotReady = "ERR_OUTBOUND_HEALTH_NOT_READY";

// What GET /v1.0/metadata says each configured store is: Dapr's Redis lock component.
constexpr std::string_view kStoreComponentType = "lock.redis";
constexpr std::string_view kStoreComponentVersion = "v1";

// Dapr's unlock status values.
constexpr int kUnlockSuccess = 0;
constexpr int kLockDoesNotExist = 1;
constexpr int kLockBelongsToOthers = 2;
constexpr int kInternalError = 3;

void sendDaprError(const http::ResponderPtr& res, int status, std::string_view code,
                   std::string_view message, int unlock_status = -1) {
  JsonObject body;
  if (unlock_status >= 0) body.integer("status", unlock_status);
  res->send(status, kJson, body.text("errorCode", code).text("message", message).finish());
}

std::string randomSecret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    SL_LOG(kError, "dapr.secret_failed", {"error", "RAND_bytes failed"});
  }
  return std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes));
}

}  // namespace

DaprApi::DaprApi(const config::DaprConfig& dapr, const config::LocksConfig& locks,
                 lock::LockService& service, NotReadyReason not_ready_reason)
    : dapr_(dapr),
      locks_(locks),
      service_(service),
      not_ready_reason_(std::move(not_ready_reason)),
      secret_(dapr.owner_secret) {
  // As Dapr's runtime reads its bodies (and as the Dapr gRPC methods here do): a field a newer
  // SDK sends that this sidecar does not know is skipped, not refused.
  body_.ignoreUnknownFields();
  if (secret_.empty() && dapr.enabled) {
    secret_ = randomSecret();
    SL_LOG(kInfo, "dapr.owner_secret",
           {"source",
            "random for this process: Dapr locks taken before a restart cannot be "
            "unlocked, only expire (set dapr.owner_secret_env or owner_secret_file)"});
  }
}

std::vector<Route> DaprApi::routes() {
  if (!dapr_.enabled) return {};
  return {
      {"POST", "/v1.0-alpha1/lock/{store}",
       [this](http::Request& req, http::ResponderPtr res) { lock(req, std::move(res)); }},
      {"POST", "/v1.0-alpha1/unlock/{store}",
       [this](http::Request& req, http::ResponderPtr res) { unlock(req, std::move(res)); }},
      {"GET", "/v1.0/metadata",
       [this](http::Request& req, http::ResponderPtr res) { metadata(req, std::move(res)); }},
      {"GET", "/v1.0/healthz",
       [this](http::Request&, http::ResponderPtr res) { health(kHealthNotReady, std::move(res)); }},
      {"GET", "/v1.0/healthz/outbound",
       [this](http::Request&, http::ResponderPtr res) {
         health(kOutboundNotReady, std::move(res));
       }},
  };
}

void DaprApi::metadata(http::Request& /*req*/, http::ResponderPtr res) {
  // Dapr's answer (docs.dapr.io, "Metadata API reference") with what sidelock has: no actors,
  // subscriptions or HTTP endpoints, and one lock component per named store. With "*" every store
  // name is accepted and none is listed.
  nlohmann::json components = nlohmann::json::array();
  for (const std::string& store : dapr_.stores) {
    if (store == "*") continue;
    components.push_back({{"name", store},
                          {"type", kStoreComponentType},
                          {"version", kStoreComponentVersion},
                          {"capabilities", nlohmann::json::array()}});
  }
  sendJson(res, 200,
           {{"id", dapr_.app_id},
            {"runtimeVersion", SIDELOCK_VERSION},
            {"enabledFeatures", nlohmann::json::array()},
            {"actors", nlohmann::json::array()},
            {"components", std::move(components)},
            {"extended", {{"runtime", "sidelock"}}}});
}

void DaprApi::health(std::string_view error_code, http::ResponderPtr res) {
  // Dapr answers 204 without a body when ready; sidelock is ready when /readyz says so.
  const std::string reason = not_ready_reason_();
  if (reason.empty()) return res->send(204, "", "");
  sendDaprError(res, 500, error_code, "sidelock is not ready: " + reason);
}

std::string DaprApi::ownerFor(std::string_view resource_id, std::string_view lock_owner) const {
  std::string message;
  message.reserve(resource_id.size() + 1 + lock_owner.size());
  message.append(resource_id).push_back('\0');  // no (resource, owner) pair spells another
  message.append(lock_owner);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &mac_len);
  // 128 bits, spelled like a generated owner id.
  return lowerHex(mac, std::min(mac_len, 16u));
}

std::string DaprApi::lockNameOfResource(std::string_view resource_id) {
  std::string name(resource_id);
  std::replace(name.begin(), name.end(), '/', '~');
  return name;
}

bool DaprApi::readCommon(http::Request& req, const http::ResponderPtr& res,
                         std::initializer_list<BodyField> fields, std::string_view* resource_id,
                         std::string_view* lock_owner, std::string* lock_name) {
  const std::string_view store = req.param("store");
  if (std::find(dapr_.stores.begin(), dapr_.stores.end(), "*") == dapr_.stores.end() &&
      std::find(dapr_.stores.begin(), dapr_.stores.end(), store) == dapr_.stores.end()) {
    sendDaprError(res, 400, kStoreNotFound,
                  "lock store " + std::string(store) + " is not found (dapr.stores)");
    return false;
  }
  RequestBody& body = body_;
  body.parse(req, fields);
  if (body.ok()) body.readString(BodyField::kResourceId, *resource_id);
  if (body.ok()) body.readString(BodyField::kLockOwner, *lock_owner);
  if (!body.ok()) {
    sendDaprError(res, body.errorCode() == "unsupported_media_type" ? 415 : 400, kMalformed,
                  body.error());
    return false;
  }
  if (resource_id->empty()) {
    sendDaprError(res, 400, kMalformed, "ResourceId is empty in lock store " + std::string(store));
    return false;
  }
  if (lock_owner->empty()) {
    sendDaprError(res, 400, kMalformed, "LockOwner is empty in lock store " + std::string(store));
    return false;
  }
  if (lock_owner->size() > kMaxLockOwnerBytes) {
    sendDaprError(res, 400, kMalformed,
                  "lockOwner is longer than " + std::to_string(kMaxLockOwnerBytes) + " bytes");
    return false;
  }
  if (const size_t tilde = resource_id->find('~'); tilde != std::string_view::npos) {
    sendDaprError(res, 400, kMalformed,
                  "resourceId: '~' at byte " + std::to_string(tilde + 1) +
                      " is not allowed in a resourceId (sidelock's lock name of a resourceId "
                      "spells its '/' as '~')");
    return false;
  }
  *lock_name = lockNameOfResource(*resource_id);
  std::string problem =
      LockApi::lockNameProblem(*lock_name, static_cast<size_t>(locks_.max_name_bytes));
  if (!problem.empty()) {
    // (Byte positions are the resourceId's: the mapping keeps them.)
    sendDaprError(res, 400, kMalformed,
                  "resourceId: " + problem +
                      "; a resourceId may contain '/' too (its lock name has '~' in its place), "
                      "but not '~'");
    return false;
  }
  if (!LockApi::mayUseLock(req.principal.get(), *lock_name)) {
    sendDaprError(res, 403, kPermissionDenied,
                  "this token may not use resourceId " + std::string(*resource_id));
    return false;
  }
  return true;
}

void DaprApi::lock(http::Request& req, http::ResponderPtr res) {
  std::string_view resource_id, lock_owner;
  std::string lock_name;
  if (!readCommon(req, res,
                  {BodyField::kResourceId, BodyField::kLockOwner, BodyField::kExpiryInSeconds},
                  &resource_id, &lock_owner, &lock_name)) {
    return;
  }
  int64_t expiry_s = 0;
  const int64_t max_s = std::max<int64_t>(1, locks_.max_ttl_ms / 1000);
  if (!body_.has(BodyField::kExpiryInSeconds)) {
    body_.setError("expiryInSeconds is required");
  } else {
    body_.readInt(BodyField::kExpiryInSeconds, 1, max_s, expiry_s);
  }
  if (!body_.ok()) return sendDaprError(res, 400, kMalformed, body_.error());

  lock::AcquireOptions opts;
  opts.lock.name = std::move(lock_name);  // a mutex
  opts.owner = ownerFor(resource_id, lock_owner);
  opts.ttl_ms = expiry_s * 1000;
  opts.wait_ms = 0;  // Dapr's lock is a try-lock
  opts.holder = identity_;  // who holds it, as a v1 acquire naming no holder
  // The ticket must outlive the call (destroying it cancels the try); the done callback owns it.
  auto ticket = std::make_shared<lock::AcquireTicket>();
  *ticket = service_.acquire(
      std::move(opts), [res, ticket, service = &service_](lock::AcquireResult r) mutable {
        ticket->release();  // answered: nothing left to cancel
        ticket.reset();
        switch (r.status) {
          case lock::AcquireStatus::kGranted:
            // A grant the client provably never read is given back: its retry would find the lock
            // held by "itself" and answer false, as the first try never got to say true.
            res->onUndelivered([service, lock = r.grant.lock, owner = r.grant.owner] {
              service->release(lock, owner, [](StatusOr<lock::ReleaseStatus>) {});
            });
            return res->send(200, kJson, JsonObject().boolean("success", true).finish());
          case lock::AcquireStatus::kBusy:
          case lock::AcquireStatus::kTooManyWaiters:
            return res->send(200, kJson, JsonObject().boolean("success", false).finish());
          case lock::AcquireStatus::kCancelled:
            return sendDaprError(res, 500, kTryLockFailed, "the sidecar is shutting down");
          case lock::AcquireStatus::kLimitMismatch:  // semaphores only; kept total
          case lock::AcquireStatus::kError:
            return sendDaprError(res, 500, kTryLockFailed, r.error.message());
        }
      });
  res->onClientGone([weak = std::weak_ptr<lock::AcquireTicket>(ticket)] {
    if (auto t = weak.lock()) t->cancel();
  });
}

void DaprApi::unlock(http::Request& req, http::ResponderPtr res) {
  std::string_view resource_id, lock_owner;
  std::string lock_name;
  if (!readCommon(req, res, {BodyField::kResourceId, BodyField::kLockOwner}, &resource_id,
                  &lock_owner, &lock_name)) {
    return;
  }
  service_.release(
      lock::LockId{lock::LockKind::kMutex, std::move(lock_name)}, ownerFor(resource_id, lock_owner),
      [res](StatusOr<lock::ReleaseStatus> r) {
        if (!r.isOk()) {
          return sendDaprError(res, 500, kUnlockFailed, r.status().message(), kInternalError);
        }
        int status = kUnlockSuccess;
        switch (*r) {
          case lock::ReleaseStatus::kReleased:
          case lock::ReleaseStatus::kHoldReleased:  // Dapr owners never re-enter; kept total
            status = kUnlockSuccess;
            break;
          case lock::ReleaseStatus::kNotHeld:
          case lock::ReleaseStatus::kLeaseLost:
            status = kLockDoesNotExist;
            break;
          case lock::ReleaseStatus::kNotOwner:
            status = kLockBelongsToOthers;
            break;
        }
        res->send(200, kJson, JsonObject().integer("status", status).finish());
      });
}

}  // namespace sidelock::api
