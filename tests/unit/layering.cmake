# src/ layering: each layer includes only the layers it declares in src/CMakeLists.txt (issue 13).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME layering_test
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/layering_test.py ${PROJECT_SOURCE_DIR}/src)
  set_tests_properties(layering_test PROPERTIES LABELS unit TIMEOUT 60)
endif()
