# Lock event streams (issue 20): two sidecars on one Redis, then a lock's life (holder, events,
# lock-delay) on Sentinel, a 3-master Cluster and a 3-node Redlock; ~18 s.
sidelock_test(lock_events_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/lock_events_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
add_dependencies(lock_events_test sidelock)
