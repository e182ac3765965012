sidelock_test(safe_retries_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safe_retries_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(safe_retries_test sidelock)
