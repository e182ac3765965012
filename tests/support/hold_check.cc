#include "support/hold_check.h"

#include <algorithm>
#include <map>
#include <utility>

namespace sidelock::testing {
namespace {

std::string describe(const Hold& h) {
  if (!h.who.empty()) return h.who;
  return std::string(h.mode == HoldMode::kShared ? "a shared hold" : "an exclusive hold") +
         " [" + std::to_string(h.from_us) + ", " + std::to_string(h.to_us) + ") us";
}

int64_t steadyUs(HoldLog::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

ExclusionReport checkExclusion(std::vector<Hold> holds, const ExclusionRules& rules) {
  ExclusionReport report;
  std::map<std::string, std::vector<const Hold*>> by_lock;
  std::stable_sort(holds.begin(), holds.end(),
                   [](const Hold& a, const Hold& b) { return a.from_us < b.from_us; });
  for (const Hold& h : holds) {
    if (h.to_us > h.from_us) by_lock[h.lock].push_back(&h);  // an empty hold overlaps nothing
  }
  for (const auto& [lock, list] : by_lock) {
    std::vector<const Hold*> open;  // holds of this lock still open at the current start
    for (const Hold* h : list) {
      std::erase_if(open, [&](const Hold* o) { return o->to_us <= h->from_us; });
      int shared_open = 0;
      for (const Hold* o : open) {
        const bool conflict = h->mode == HoldMode::kExclusive || o->mode == HoldMode::kExclusive;
        if (!conflict) {
          ++shared_open;
          ++report.shared_overlaps;
          continue;
        }
        if (rules.excused && rules.excused(*o, *h)) continue;
        report.violations.push_back("lock " + lock + " held by " + describe(*o) + " and " +
                                    describe(*h));
      }
      if (h->mode == HoldMode::kShared && shared_open + 1 > rules.shared_limit) {
        report.violations.push_back("lock " + lock + " held by " + std::to_string(shared_open + 1) +
                                    " shared holders at once, over the limit of " +
                                    std::to_string(rules.shared_limit) + " (the last: " +
                                    describe(*h) + ")");
      }
      open.push_back(h);
      report.most_at_once = std::max(report.most_at_once, static_cast<int>(open.size()));
    }
  }
  return report;
}

void HoldLog::record(std::string lock, Clock::time_point from, Clock::time_point to,
                     HoldMode mode, std::string who) {
  Hold h{std::move(lock), steadyUs(from), steadyUs(to), mode, std::move(who), 0};
  std::lock_guard<std::mutex> guard(mu_);
  h.tag = holds_.size();
  holds_.push_back(std::move(h));
}

std::vector<Hold> HoldLog::holds() const {
  std::lock_guard<std::mutex> guard(mu_);
  return holds_;
}

size_t HoldLog::size() const {
  std::lock_guard<std::mutex> guard(mu_);
  return holds_.size();
}

}  // namespace sidelock::testing
