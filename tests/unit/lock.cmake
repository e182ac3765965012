sidelock_test(lock_unit_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backoff_test.cc ${CMAKE_CURRENT_LIST_DIR}/memory_backend_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/lock_service_test.cc ${CMAKE_CURRENT_LIST_DIR}/kind_policy_test.cc
  LIBS sidelock_lock sidelock_backend sidelock_event sidelock_metrics sidelock_common
  LABELS unit)
