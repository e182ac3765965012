sidelock_test(reentrant_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/reentrant_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(reentrant_test sidelock)
