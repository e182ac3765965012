sidelock_test(fair_lock_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fair_lock_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(fair_lock_test sidelock)
