sidelock_test(redis_acl_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_acl_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(redis_acl_test sidelock)
sidelock_test(access_control_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/access_control_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(access_control_test sidelock)
