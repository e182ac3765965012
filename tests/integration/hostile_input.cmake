# Issue 11, hostile input: bodies, content types and lock names against the real binary.
sidelock_test(hostile_input_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hostile_input_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(hostile_input_test sidelock)
