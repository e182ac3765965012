sidelock_test(health_prober_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/health_prober_test.cc
  LIBS sidelock_health sidelock_event sidelock_metrics
  LABELS integration IN_PROCESS
  TIMEOUT 60)

sidelock_test(health_hold_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/health_hold_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
add_dependencies(health_hold_test sidelock)
