sidelock_test(cli_unit_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_options_test.cc ${CMAKE_CURRENT_LIST_DIR}/cli_stream_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/cli_exit_codes_test.cc ${CMAKE_CURRENT_LIST_DIR}/cli_locks_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/cli_lease_deadline_test.cc
  LIBS sidelock_cli
  LABELS unit)
