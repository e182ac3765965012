sidelock_test(holders_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/holders_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(holders_test sidelock)
