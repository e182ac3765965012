# Benchmarks: plain executables (not GoogleTest) that print a table and one `BENCH_JSON {...}`
# line, with every speed figure also given as a ratio against a baseline measured in the same run.
# CTest runs them only as smoke tests (--quick, label bench): they pass when everything they did
# succeeded; timings are never asserted. See tests/bench/README.md.
# lock_bench: every scenario of issue 9 in one run (see README.md). Its load generator is one epoll
# loop (load_loop.cc) driving all connections, so the bench is not the bottleneck it measures.
add_executable(lock_bench ${CMAKE_CURRENT_LIST_DIR}/lock_bench.cc ${CMAKE_CURRENT_LIST_DIR}/load_loop.cc
               ${CMAKE_CURRENT_LIST_DIR}/proc_stats.cc ${CMAKE_CURRENT_LIST_DIR}/grpc_load.cc)
target_compile_options(lock_bench PRIVATE ${SIDELOCK_WARNINGS})
target_link_libraries(lock_bench PRIVATE sidelock_test_support sidelock_redis
                      nlohmann_json::nlohmann_json PkgConfig::HIREDIS
                      sidelock_api_proto PkgConfig::NGHTTP2  # the grpc scenario's client
                      sidelock_http)  # its nghttp2 allocator (http/http2_memory.h)
add_dependencies(lock_bench sidelock)
add_test(NAME lock_bench_smoke COMMAND lock_bench --quick)
# About 15 s in Release (the grpc scenario ~2.5 s of it) and 40 s under ASan on 2 loaded cores (every scenario, elections
# included): started early under `ctest -j` (COST), with room for a loaded machine (TIMEOUT).
set_tests_properties(lock_bench_smoke PROPERTIES TIMEOUT 90 COST 15 LABELS "bench;sidecar")
