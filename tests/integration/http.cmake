sidelock_test(http_server_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cc
  LIBS sidelock_http nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 120)
