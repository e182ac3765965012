# src/README.md (the architecture map and the code conventions) agrees with the tree: every src/
# directory mapped, each layer's documented includes equal to its DEPS, every cited rule present.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME conventions_test
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/conventions_test.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(conventions_test PROPERTIES LABELS unit TIMEOUT 60)
endif()
