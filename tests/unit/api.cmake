sidelock_test(api_unit_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/request_body_test.cc ${CMAKE_CURRENT_LIST_DIR}/idempotency_cache_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/lock_api_test.cc
  LIBS sidelock_api
  LABELS unit)

# PodElections (config `elections`) on a FakeScheduler + MemoryBackend.
sidelock_test(pod_elections_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/pod_elections_test.cc
  LIBS sidelock_api
  LABELS unit)
