sidelock_test(cluster_backend_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cluster_backend_test.cc
  LIBS sidelock_redis nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 600)
add_dependencies(cluster_backend_test sidelock)
sidelock_test(cluster_loop_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cluster_loop_test.cc
  LIBS sidelock_redis
  LABELS integration IN_PROCESS
  TIMEOUT 300)
