#include "chaos/history.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "support/hold_check.h"

namespace sidelock::testing::chaos {

int64_t nowUs() {
  static const auto kStart = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               kStart)
      .count();
}

const char* opName(OpKind kind) {
  switch (kind) {
    case OpKind::kAcquire:
      return "acquire";
    case OpKind::kRelease:
      return "release";
    case OpKind::kRead:
      return "read";
    case OpKind::kWrite:
      return "write";
  }
  return "?";
}

void History::add(Operation op) {
  std::lock_guard lock(mu_);
  ops_.push_back(std::move(op));
}

size_t History::addFault(Fault fault) {
  std::lock_guard lock(mu_);
  faults_.push_back(std::move(fault));
  return faults_.size() - 1;
}

size_t History::beginFault(std::string what, int process, bool loses_data) {
  const int64_t now = nowUs();
  return addFault(Fault{std::move(what), process, now, now, loses_data});
}

void History::endFault(size_t index) {
  std::lock_guard lock(mu_);
  faults_.at(index).end_us = nowUs();
}

std::vector<Operation> History::operations() const {
  std::lock_guard lock(mu_);
  return ops_;
}

std::vector<Fault> History::faults() const {
  std::lock_guard lock(mu_);
  return faults_;
}

namespace {

bool overlaps(int64_t a_start, int64_t a_end, int64_t b_start, int64_t b_end) {
  return a_start < b_end && b_start < a_end;
}

std::string describe(const GrantWindow& w) {
  std::ostringstream out;
  out << "sidecar " << w.process << " client " << w.client << " token " << w.token << " ["
      << w.start_us / 1000 << " ms, " << w.end_us / 1000 << " ms]";
  return out.str();
}

}  // namespace

std::vector<GrantWindow> grantWindows(const History& history) {
  const auto ops = history.operations();
  // The release that ends a grant is the first release by the same client of the same lock and
  // token after the grant (a token can repeat after Redis lost its data, hence the list).
  std::map<std::tuple<int, std::string, uint64_t>, std::vector<int64_t>> releases;
  for (const Operation& r : ops) {
    if (r.kind == OpKind::kRelease) releases[{r.client, r.lock, r.token}].push_back(r.invoke_us);
  }
  for (auto& [key, invokes] : releases) std::sort(invokes.begin(), invokes.end());
  std::vector<GrantWindow> windows;
  for (const Operation& grant : ops) {
    if (grant.kind != OpKind::kAcquire || grant.status != 200) continue;
    GrantWindow w{grant.process, grant.client,      grant.lock,
                  grant.token,   grant.complete_us, grant.invoke_us + grant.validity_ms * 1000};
    auto it = releases.find({grant.client, grant.lock, grant.token});
    if (it != releases.end()) {
      auto release = std::lower_bound(it->second.begin(), it->second.end(), grant.complete_us);
      if (release != it->second.end()) w.end_us = std::min(w.end_us, *release);
    }
    if (w.end_us > w.start_us) windows.push_back(w);
  }
  std::sort(windows.begin(), windows.end(),
            [](const GrantWindow& a, const GrantWindow& b) { return a.start_us < b.start_us; });
  return windows;
}

std::vector<std::string> checkMutualExclusion(const History& history) {
  const auto windows = grantWindows(history);
  const auto faults = history.faults();
  std::vector<Hold> holds;
  for (size_t i = 0; i < windows.size(); ++i) {
    const GrantWindow& w = windows[i];
    holds.push_back({w.lock, w.start_us, w.end_us, HoldMode::kExclusive, describe(w), i});
  }
  ExclusionRules rules;
  rules.excused = [&](const Hold& x, const Hold& y) {
    const GrantWindow& a = windows[x.tag];
    const GrantWindow& b = windows[y.tag];
    for (const Fault& f : faults) {
      if (f.loses_data && f.start_us <= std::max(a.end_us, b.end_us) &&
          f.start_us >= std::min(a.start_us, b.start_us)) {
        return true;
      }
    }
    return false;
  };
  std::vector<std::string> violations;
  for (const std::string& v : checkExclusion(std::move(holds), rules).violations) {
    violations.push_back("mutual exclusion: " + v);
  }
  return violations;
}

std::vector<std::string> checkTokenOrder(const History& history) {
  std::map<std::string, GrantWindow> last_by_lock;
  std::vector<std::string> violations;
  for (const GrantWindow& w : grantWindows(history)) {
    auto it = last_by_lock.find(w.lock);
    if (it != last_by_lock.end() && w.token <= it->second.token) {
      violations.push_back("fencing: lock " + w.lock + " granted " + describe(w) + " after " +
                           describe(it->second));
    }
    last_by_lock[w.lock] = w;
  }
  return violations;
}

std::vector<std::string> checkLiveness(const History& history, int64_t slack_ms) {
  const auto faults = history.faults();
  std::vector<std::string> violations;
  for (const Operation& op : history.operations()) {
    const int64_t bound_us = (op.deadline_ms + slack_ms) * 1000;
    if (op.complete_us - op.invoke_us <= bound_us) continue;
    const bool excused = std::any_of(faults.begin(), faults.end(), [&](const Fault& f) {
      return f.process == op.process &&
             overlaps(f.start_us, f.end_us + 1, op.invoke_us, op.complete_us);
    });
    if (excused) continue;
    std::ostringstream out;
    out << "liveness: " << opName(op.kind) << " " << op.lock << " by sidecar " << op.process
        << " client " << op.client << " took " << (op.complete_us - op.invoke_us) / 1000
        << " ms, bound " << bound_us / 1000 << " ms (status " << op.status << ")";
    violations.push_back(out.str());
  }
  return violations;
}

namespace {

/// With SIDELOCK_CHAOS_LOG_DIR set, writes the scenario's log there as `<scenario>.log`: one line
/// per fault and per operation, for reading a violation against what happened around it.
void writeLog(const std::string& scenario, const History& history) {
  const char* dir = getenv("SIDELOCK_CHAOS_LOG_DIR");
  if (dir == nullptr || *dir == '\0') return;
  std::string file = scenario;
  for (char& c : file) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  std::ofstream out(std::string(dir) + "/" + file + ".log");
  for (const Fault& f : history.faults()) {
    out << "fault start_us=" << f.start_us << " end_us=" << f.end_us << " process=" << f.process
        << " loses_data=" << f.loses_data << " what=\"" << f.what << "\"\n";
  }
  for (const Operation& op : history.operations()) {
    out << "op process=" << op.process << " client=" << op.client << " op=" << opName(op.kind)
        << " lock=" << op.lock << " token=" << op.token << " validity_ms=" << op.validity_ms
        << " wait_ms=" << op.deadline_ms << " status=" << op.status << " fenced=" << op.fenced
        << " invoke_us=" << op.invoke_us << " complete_us=" << op.complete_us << "\n";
  }
}

}  // namespace

Figures report(const std::string& scenario, const History& history,
               const std::vector<std::string>& violations) {
  writeLog(scenario, history);
  Figures figures;
  const auto ops = history.operations();
  figures.operations = ops.size();
  figures.grants = static_cast<size_t>(std::count_if(ops.begin(), ops.end(), [](const auto& op) {
    return op.kind == OpKind::kAcquire && op.status == 200;
  }));
  const auto faults = history.faults();
  figures.faults = faults.size();
  figures.violations = violations.size();
  std::printf("[chaos] %s: operations=%zu grants=%zu faults=%zu violations=%zu\n", scenario.c_str(),
              figures.operations, figures.grants, figures.faults, figures.violations);
  for (const Fault& f : faults) {
    std::printf("[chaos]   fault: %s (%lld..%lld ms)\n", f.what.c_str(),
                static_cast<long long>(f.start_us / 1000), static_cast<long long>(f.end_us / 1000));
  }
  for (const std::string& v : violations) std::printf("[chaos]   VIOLATION %s\n", v.c_str());
  std::fflush(stdout);
  return figures;
}

}  // namespace sidelock::testing::chaos
