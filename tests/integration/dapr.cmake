sidelock_test(dapr_api_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/dapr_api_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(dapr_api_test sidelock)
