# Fuzz targets (tests/fuzz/README.md). In the normal builds each target is linked with a small
# replay main and its in-tree corpus is replayed as a CTest (so the ASan pass checks every seed).
# With -DSIDELOCK_FUZZ=ON (clang) each is also a libFuzzer binary: <target>.
set(SIDELOCK_FUZZ_TARGETS http_request_fuzz request_body_fuzz grpc_frame_fuzz)
set(http_request_fuzz_LIBS sidelock_http)
# RequestBody is the api layer's one file this target drives, and it needs only http's types: built
# here from its source, so that the fuzz build (tests/fuzz/run_fuzz.sh) compiles the layers the
# targets reach (common, event, metrics, http, grpc) and not the whole api layer with the lock
# service and the generated protobuf code.
set(request_body_fuzz_LIBS sidelock_http nlohmann_json::nlohmann_json)
set(request_body_fuzz_SOURCES ${PROJECT_SOURCE_DIR}/src/api/request_body.cc)
set(grpc_frame_fuzz_LIBS sidelock_grpc)

foreach(target ${SIDELOCK_FUZZ_TARGETS})
  add_executable(${target}_replay ${CMAKE_CURRENT_LIST_DIR}/${target}.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/replay_main.cc ${${target}_SOURCES})
  target_compile_options(${target}_replay PRIVATE ${SIDELOCK_WARNINGS})
  target_link_libraries(${target}_replay PRIVATE ${${target}_LIBS})
  add_test(NAME ${target}_corpus
           COMMAND ${target}_replay ${CMAKE_CURRENT_LIST_DIR}/corpus/${target})
  set_tests_properties(${target}_corpus PROPERTIES TIMEOUT 120 LABELS "unit;fuzz")
  if(SIDELOCK_FUZZ)
    add_executable(${target} ${CMAKE_CURRENT_LIST_DIR}/${target}.cc ${${target}_SOURCES})
    target_compile_options(${target} PRIVATE ${SIDELOCK_WARNINGS} -fsanitize=fuzzer)
    target_link_libraries(${target} PRIVATE ${${target}_LIBS})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()
