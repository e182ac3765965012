sidelock_test(cli_run_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_run_test.cc
  LABELS integration
  TIMEOUT 300)
add_dependencies(cli_run_test sidelock)
