// N sidecars on one real redis-server: the setup of every test of behaviour across sidecars.
//
//   TEST_F(TwoSidecarsOnOneRedis, ...) { ca.post(...); cb.post(...); redis.cli(...); }
//   TEST(...) { SidecarGroup group(3); group[2]->kill(); ...; group.expectCleanStops(); }
//
// Every sidecar still running at the end must stop cleanly (exit 0 on SIGTERM): a failure names
// it and carries its logs. A sidecar the test killed is not running and is not checked.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {

class SidecarGroup {
 public:
  /// A redis-server, then `count` ready sidecars on it with defaults otherwise (sidecarOnRedis).
  explicit SidecarGroup(size_t count);
  SidecarGroup(const SidecarGroup&) = delete;
  SidecarGroup& operator=(const SidecarGroup&) = delete;

  /// The i-th sidecar (a unique_ptr, so `group[0]->port()` reads like the tests' own pointers).
  std::unique_ptr<SidecarProcess>& operator[](size_t i) { return sidecars_.at(i); }
  size_t size() const { return sidecars_.size(); }
  /// A new client of the i-th sidecar's TCP port.
  HttpClient client(size_t i) const { return HttpClient::tcp(sidecars_.at(i)->port()); }
  /// Stops every sidecar still running; each must exit 0.
  void expectCleanStops();

  // Declared before the sidecars: they are started on it, and stopped before it.
  RedisServer redis;

 private:
  std::vector<std::unique_ptr<SidecarProcess>> sidecars_;
};

/// gtest fixture: two sidecars `a` and `b` on one `redis`, a client of each (`ca`, `cb`); both
/// must stop cleanly when the test ends.
class TwoSidecarsOnOneRedis : public ::testing::Test {
 protected:
  void TearDown() override { group.expectCleanStops(); }

  SidecarGroup group{2};
  RedisServer& redis = group.redis;
  std::unique_ptr<SidecarProcess>& a = group[0];
  std::unique_ptr<SidecarProcess>& b = group[1];
  HttpClient ca = group.client(0);
  HttpClient cb = group.client(1);
};

}  // namespace sidelock::testing
