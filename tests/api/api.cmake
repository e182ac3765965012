# The OpenAPI contract (issue 13): src/api/openapi.json against itself, README.md's examples and a
# real sidecar's answers. python3-jsonschema comes from deploy/scripts/install-deps.sh.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME openapi_contract
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/openapi_test.py
            --sidelock $<TARGET_FILE:sidelock> --repo ${PROJECT_SOURCE_DIR})
  set_tests_properties(openapi_contract PROPERTIES LABELS integration TIMEOUT 120)
endif()
