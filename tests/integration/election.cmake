sidelock_test(election_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/election_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(election_test sidelock)

# Elections the sidecar runs for its pod (config `elections`): two sidecars, one Redis, ~5 s.
sidelock_test(configured_elections_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/configured_elections_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
add_dependencies(configured_elections_test sidelock)
