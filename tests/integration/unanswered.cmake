sidelock_test(unanswered_grant_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unanswered_grant_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(unanswered_grant_test sidelock)
