# Redlock backend (issue 3) on five real redis-server processes per test.
sidelock_test(redlock_backend_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redlock_backend_test.cc
  LIBS sidelock_redis sidelock_event sidelock_metrics
  LABELS integration IN_PROCESS
  TIMEOUT 300)
sidelock_test(redlock_fault_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redlock_fault_test.cc
  LIBS sidelock_redis sidelock_event sidelock_metrics
  LABELS integration IN_PROCESS
  TIMEOUT 300)
