#include "support/sidecar_group.h"

namespace sidelock::testing {

SidecarGroup::SidecarGroup(size_t count) {
  for (size_t i = 0; i < count; ++i) sidecars_.push_back(sidecarOnRedis(redis.address()));
}

void SidecarGroup::expectCleanStops() {
  for (size_t i = 0; i < sidecars_.size(); ++i) {
    SidecarProcess& s = *sidecars_[i];
    if (!s.running()) continue;
    EXPECT_EQ(s.stop(), 0) << "sidecar " << i << " of " << sidecars_.size() << ":\n" << s.logs();
  }
}

}  // namespace sidelock::testing
