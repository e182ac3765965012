sidelock_test(lock_delay_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/lock_delay_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
add_dependencies(lock_delay_test sidelock)
