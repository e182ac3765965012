# The client examples of deploy/examples (issue 22), run against a real sidecar and redis-server:
# Python (standard library), Node (built-in fetch; the nodejs package), Go (standard library,
# built offline). Needs redis-server, node and go from deploy/scripts/install-deps.sh.
find_package(Python3 COMPONENTS Interpreter)
# Against the shipped binary only (label "shipped", tests/run.sh): what it checks is the clients'
# code (Python, Node, Go), which the sanitizers do not see, and the sidecar routes it calls are the
# ones every other test drives.
if(Python3_Interpreter_FOUND)
  add_test(NAME client_examples
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/examples_test.py
            --sidelock ${SIDELOCK_UNDER_TEST} --repo ${PROJECT_SOURCE_DIR})
  set_tests_properties(client_examples PROPERTIES LABELS "integration;shipped" TIMEOUT 300)
endif()
