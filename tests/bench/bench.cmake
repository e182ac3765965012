# Benchmarks: plain executables (not GoogleTest) that print a table and one `BENCH_JSON {...}`
# line, with every speed figure also given as a ratio against a baseline measured in the same run.
# CTest runs them only as smoke tests (--quick, label bench): they pass when everything they did
# succeeded; timings are never asserted. See tests/bench/README.md.
add_executable(handoff_bench ${CMAKE_CURRENT_LIST_DIR}/handoff_bench.cc)
target_compile_options(handoff_bench PRIVATE ${SIDELOCK_WARNINGS})
# sidelock_redis only for the Lua scripts and key names, so the direct baseline does exactly the
# Redis work the sidecar does; hiredis' sync API talks to Redis directly.
target_link_libraries(handoff_bench PRIVATE sidelock_test_support sidelock_redis
                      nlohmann_json::nlohmann_json PkgConfig::HIREDIS)
add_dependencies(handoff_bench sidelock)
add_test(NAME handoff_bench_smoke COMMAND handoff_bench --quick)
set_tests_properties(handoff_bench_smoke PROPERTIES TIMEOUT 60 LABELS bench)
