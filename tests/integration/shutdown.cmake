sidelock_test(shutdown_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/shutdown_test.cc
  LABELS integration
  TIMEOUT 120)
add_dependencies(shutdown_test sidelock)
