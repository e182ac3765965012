sidelock_test(http_server_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cc
  LIBS sidelock_http nlohmann_json::nlohmann_json
  LABELS integration IN_PROCESS
  TIMEOUT 120)

# The HTTP/2 + gRPC transport against python3-h2 clients, some of them hostile (rapid reset,
# CONTINUATION / SETTINGS / PING floods, HPACK bomb, a peer that never reads, garbage preface),
# through a test server with echo methods (grpc_echo_server) and through the sidecar binary
# (listen.grpc, listen.grpc_unix, the Unix peer-uid policy). Debian's python3 (python3-h2).
add_executable(grpc_echo_server ${CMAKE_CURRENT_LIST_DIR}/grpc_echo_server.cc)
target_compile_options(grpc_echo_server PRIVATE ${SIDELOCK_WARNINGS})
target_link_libraries(grpc_echo_server PRIVATE sidelock_grpc)
find_program(SIDELOCK_DEBIAN_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(SIDELOCK_DEBIAN_PYTHON3)
  add_test(NAME grpc_transport_test
    COMMAND ${SIDELOCK_DEBIAN_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grpc_transport_test.py
            $<TARGET_FILE:grpc_echo_server> ${SIDELOCK_UNDER_TEST})
  set_tests_properties(grpc_transport_test PROPERTIES LABELS "integration;sidecar" TIMEOUT 120)
endif()
