sidelock_test(semaphore_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/semaphore_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(semaphore_test sidelock)
