# Redlock quorum arithmetic: pure functions, compiled straight in (no hiredis, no loop).
sidelock_test(quorum_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/quorum_test.cc ${PROJECT_SOURCE_DIR}/src/redis/quorum.cc
  LIBS sidelock_common
  LABELS unit)
