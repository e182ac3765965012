sidelock_test(cli_run_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_run_test.cc
  LABELS integration
  TIMEOUT 300)
add_dependencies(cli_run_test sidelock)
sidelock_test(cli_locks_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_locks_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(cli_locks_test sidelock)
