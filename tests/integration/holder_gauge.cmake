sidelock_test(holder_gauge_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/holder_gauge_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
add_dependencies(holder_gauge_test sidelock)
