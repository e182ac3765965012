sidelock_test(api_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 600)
add_dependencies(api_test sidelock)
