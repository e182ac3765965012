// LockService::listHeld: the admin listing of held locks (README "List held locks").
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "lock/lock_service.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
namespace {

// The inspects of one listing, answered in any order; the last one answers the listing.
struct Listing {
  std::function<void(StatusOr<HeldListing>)> done;
  size_t limit = 0;
  backend::ScannedNames scanned;
  std::vector<std::optional<HeldLock>> found;  // per scanned name: held (with a holder) or not
  size_t pending = 0;
  std::string error;  // the first inspect failure
};

void answer(Listing& l) {
  HeldListing out;
  std::vector<std::string> reasons;
  for (auto& f : l.found) {
    if (f.has_value()) out.locks.push_back(std::move(*f));
  }
  if (out.locks.size() > l.limit || l.scanned.overflow) {
    out.locks.resize(std::min(out.locks.size(), l.limit));
    reasons.push_back("more than " + std::to_string(l.limit) +
                      " locks match: raise limit or narrow prefix");
  }
  if (l.scanned.out_of_time) reasons.push_back("the scan's time budget ran out");
  for (const std::string& e : l.scanned.node_errors) reasons.push_back("not scanned: " + e);
  if (!l.error.empty()) reasons.push_back("not inspected: " + l.error);
  out.truncated = !reasons.empty();
  for (const std::string& r : reasons) {
    if (!out.truncated_reason.empty()) out.truncated_reason += "; ";
    out.truncated_reason += r;
  }
  l.done(std::move(out));
}

}  // namespace

void LockService::Impl::scanHolders(const backend::HolderScan& scan, backend::ScanCallback done) {
  backend_.scanHolders(scan, guarded([this, done = std::move(done)](
                                         StatusOr<backend::ScannedNames> r) mutable {
    deliver([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }));
}

void LockService::listHeld(const HeldQuery& query,
                           std::function<void(StatusOr<HeldListing>)> done) {
  backend::HolderScan scan;
  scan.prefix = query.prefix;
  scan.keep = query.limit + 1;  // one more than asked: tells "more exist"
  scan.budget_ms = query.budget_ms;
  impl_->scanHolders(scan, [this, limit = query.limit, done = std::move(done)](
                               StatusOr<backend::ScannedNames> r) mutable {
    if (!r.isOk()) return done(r.status());
    auto l = std::make_shared<Listing>();
    l->done = std::move(done);
    l->limit = limit;
    l->scanned = std::move(*r);
    l->found.resize(l->scanned.names.size());
    l->pending = l->scanned.names.size();
    if (l->pending == 0) return answer(*l);
    for (size_t i = 0; i < l->scanned.names.size(); ++i) {
      const std::string& name = l->scanned.names[i];
      inspect(LockId{LockKind::kMutex, name}, [l, i](StatusOr<LockState> s) {
        if (!s.isOk()) {
          if (l->error.empty()) l->error = l->scanned.names[i] + ": " + s.status().message();
        } else if (s->held && !s->holder.empty()) {
          l->found[i] = HeldLock{l->scanned.names[i], std::move(s->holder), s->since_ms,
                                 s->ttl_ms, s->token};
        }
        if (--l->pending == 0) answer(*l);
      });
    }
  });
}

}  // namespace sidelock::lock
