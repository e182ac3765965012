// A sidecar with backend.type redlock over `n` fresh redis-server nodes (redlockBackendYaml:
// short node timeout, no delayed restart), for tests of what the sidecar does with Redlock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {

struct RedlockSidecar {
  explicit RedlockSidecar(int n) {
    std::vector<std::string> addresses;
    for (int i = 0; i < n; ++i) {
      nodes.push_back(std::make_unique<RedisServer>());
      addresses.push_back(nodes.back()->address());
    }
    sidecar = std::make_unique<SidecarProcess>(
        SidecarProcess::Options{redlockBackendYaml(addresses), {}, /*wait_ready=*/true});
  }

  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::unique_ptr<SidecarProcess> sidecar;
};

}  // namespace sidelock::testing
