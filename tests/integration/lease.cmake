sidelock_test(lease_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/lease_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 600)
add_dependencies(lease_test sidelock)
