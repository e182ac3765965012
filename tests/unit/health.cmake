sidelock_test(probe_url_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/probe_url_test.cc
  LIBS sidelock_health
  LABELS unit)
