# sidelock's gRPC services end to end (issue 21): a client built from src/api/proto at run time by
# @grpc/grpc-js + @grpc/proto-loader (pinned in dapr-sdk/package-lock.json, installed as
# dapr_sdk_test's packages are) against a real sidecar (listen.grpc) on a real redis-server:
# every sidelock.v1 method, Hold released by cancelling, deadlines, errors, tokens, one lock across
# protocols, grpc.health.v1, the protocol="grpc" metrics.
find_program(SIDELOCK_NODE node)
if(SIDELOCK_NODE)
  add_test(NAME grpc_api_test
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/dapr-sdk/run.sh ${PROJECT_SOURCE_DIR}
            ${SIDELOCK_UNDER_TEST} grpc_api_test.mjs)
  set_tests_properties(grpc_api_test PROPERTIES TIMEOUT 300 LABELS "integration;sidecar" COST 5)
else()
  message(WARNING "node not found (Debian: nodejs): the grpc_api_test test is not registered")
endif()
