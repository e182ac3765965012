sidelock_test(redis_unit_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_scripts_test.cc ${CMAKE_CURRENT_LIST_DIR}/resp_test.cc
  LIBS sidelock_redis
  LABELS unit)
