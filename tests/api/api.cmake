# The OpenAPI contract (issue 13): src/api/openapi.json against itself, README.md's examples and a
# real sidecar's answers. python3-jsonschema comes from deploy/scripts/install-deps.sh.
# README.md (issue 22): every link and anchor resolves, the Contents list and the tables are
# whole, and every configuration key README.md and config/sidelock.yaml name is one that
# `sidelock --check-config` accepts (standard library only).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(checks openapi_contract:openapi_test.py:integration)
  # The README check reads docs and runs --check-config: the Release pass has it; the ASan+UBSan
  # pass (SIDELOCK_SANITIZE) skips it, as tests/integration/deploy.cmake does the chart checks.
  if(NOT SIDELOCK_SANITIZE)
    list(APPEND checks readme_links_and_keys:readme_test.py:unit)
  endif()
  foreach(check IN LISTS checks)
    string(REPLACE ":" ";" parts ${check})
    list(GET parts 0 name)
    list(GET parts 1 script)
    list(GET parts 2 label)
    add_test(NAME ${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/${script}
              --sidelock $<TARGET_FILE:sidelock> --repo ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES LABELS ${label} TIMEOUT 120)
  endforeach()
endif()
