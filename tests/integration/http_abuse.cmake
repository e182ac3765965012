sidelock_test(http_abuse_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_abuse_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(http_abuse_test sidelock)
