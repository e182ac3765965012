sidelock_test(read_write_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/read_write_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(read_write_test sidelock)
