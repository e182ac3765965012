sidelock_test(multi_lock_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/multi_lock_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(multi_lock_test sidelock)
