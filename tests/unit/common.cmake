sidelock_test(common_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/status_test.cc ${CMAKE_CURRENT_LIST_DIR}/log_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/rate_limited_log_test.cc ${CMAKE_CURRENT_LIST_DIR}/invariant_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/scheduler_test.cc ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/lifetime_test.cc ${CMAKE_CURRENT_LIST_DIR}/pod_identity_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/percent_encoding_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/retry_queue_test.cc
  LIBS sidelock_common sidelock_event sidelock_metrics
  LABELS unit)
