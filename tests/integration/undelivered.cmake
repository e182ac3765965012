sidelock_test(undelivered_grant_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/undelivered_grant_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(undelivered_grant_test sidelock)
