sidelock_test(health_prober_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/health_prober_test.cc
  LIBS sidelock_health sidelock_event sidelock_metrics
  LABELS integration
  TIMEOUT 60)
