sidelock_test(sentinel_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sentinel_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(sentinel_test sidelock)
