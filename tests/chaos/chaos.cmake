# The fault harness (tests/chaos/README.md): real sidecars, real redis-servers, faults injected
# while a fenced workload runs, checkers over the operation log. Label `chaos`.
find_package(Threads REQUIRED)
add_library(sidelock_chaos STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_proxy.cc
  ${CMAKE_CURRENT_LIST_DIR}/fenced_register.cc
  ${CMAKE_CURRENT_LIST_DIR}/history.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics_watch.cc
  ${CMAKE_CURRENT_LIST_DIR}/net_namespace.cc
  ${CMAKE_CURRENT_LIST_DIR}/shell.cc
  ${CMAKE_CURRENT_LIST_DIR}/workload.cc)
target_compile_options(sidelock_chaos PRIVATE ${SIDELOCK_WARNINGS} ${SIDELOCK_TEST_OPTIMIZE})
target_include_directories(sidelock_chaos PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sidelock_chaos PUBLIC sidelock_test_support nlohmann_json::nlohmann_json
  Threads::Threads)

foreach(suite checkers sidecar_faults redis_faults clock_and_network soak election_faults)
  # The checkers' own test is pure logic over made-up histories: no sidecar.
  set(in_process)
  if(suite STREQUAL "checkers")
    set(in_process IN_PROCESS)
  endif()
  sidelock_test(chaos_${suite}_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${suite}_test.cc
    LIBS sidelock_chaos
    LABELS chaos
    TIMEOUT 300
    ${in_process})
  add_dependencies(chaos_${suite}_test sidelock)
endforeach()
