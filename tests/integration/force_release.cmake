sidelock_test(force_release_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/force_release_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(force_release_test sidelock)
