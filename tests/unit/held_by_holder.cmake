sidelock_test(held_by_holder_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/held_by_holder_test.cc
  LIBS sidelock_lock sidelock_backend sidelock_event sidelock_metrics sidelock_common
  LABELS unit)
