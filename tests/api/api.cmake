# The OpenAPI contract (issue 13): src/api/openapi.json against itself, README.md's examples and a
# real sidecar's answers. python3-jsonschema comes from deploy/scripts/install-deps.sh.
# README.md (issue 22): every link and anchor resolves, the Contents list and the tables are
# whole, and every configuration key README.md and config/sidelock.yaml name is one that
# `sidelock --check-config` accepts (standard library only).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  # The README check reads docs and runs --check-config: against the shipped binary only (label
  # "shipped", tests/run.sh), as the chart checks (tests/integration/deploy.cmake).
  set(checks openapi_contract:openapi_test.py:integration,sidecar
             readme_links_and_keys:readme_test.py:unit,shipped)
  foreach(check IN LISTS checks)
    string(REPLACE ":" ";" parts ${check})
    list(GET parts 0 name)
    list(GET parts 1 script)
    list(GET parts 2 labels)
    string(REPLACE "," ";" labels "${labels}")
    add_test(NAME ${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/${script}
              --sidelock ${SIDELOCK_UNDER_TEST} --repo ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT 120)
  endforeach()
endif()
