sidelock_test(config_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_test.cc
  LIBS sidelock_config
  LABELS unit)
