sidelock_test(dapr_api_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/dapr_api_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(dapr_api_test sidelock)

# The official Dapr JS SDK (@dapr/dapr from npm, pinned in dapr-sdk/package-lock.json) over HTTP
# against a real sidecar on a real redis-server (issue 21). tests/run.sh installs the SDK before
# ctest; run.sh installs it itself when missing. About 3 s (the sidecar is the binary under test, so
# the sanitizer pass runs it too).
find_program(SIDELOCK_NODE node)
if(SIDELOCK_NODE)
  add_test(NAME dapr_sdk_test
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/dapr-sdk/run.sh ${PROJECT_SOURCE_DIR}
            ${SIDELOCK_UNDER_TEST})
  set_tests_properties(dapr_sdk_test PROPERTIES TIMEOUT 300 LABELS "integration;sidecar" COST 5)
else()
  message(WARNING "node not found (Debian: nodejs): the dapr_sdk_test test is not registered")
endif()
