sidelock_test(safe_retries_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safe_retries_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(safe_retries_test sidelock)
sidelock_test(safe_retries_in_flight_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safe_retries_in_flight_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(safe_retries_in_flight_test sidelock)
# A memory-budget test (RSS against the chart's limit): against the shipped binary only (label
# "shipped", tests/run.sh). Under ASan+UBSan RSS is ASan's own and the test could check only the
# byte bound, which the shipped pass checks too, at 69 s of the sanitizer pass's time.
sidelock_test(request_id_memory_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/request_id_memory_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/../bench/proc_stats.cc
  LABELS integration shipped
  TIMEOUT 300)
add_dependencies(request_id_memory_test sidelock)
