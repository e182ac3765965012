sidelock_test(sidecar_redlock_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sidecar_redlock_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(sidecar_redlock_test sidelock)
