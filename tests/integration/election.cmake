sidelock_test(election_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/election_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(election_test sidelock)
