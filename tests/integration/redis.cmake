sidelock_test(redis_integration_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_node_test.cc ${CMAKE_CURRENT_LIST_DIR}/redis_backend_test.cc
  LIBS sidelock_redis
  LABELS integration IN_PROCESS
  TIMEOUT 300)
sidelock_test(redis_tls_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_tls_test.cc
  LIBS sidelock_redis
  LABELS integration IN_PROCESS
  TIMEOUT 300)
sidelock_test(differential_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/differential_test.cc
  LIBS sidelock_redis
  LABELS integration IN_PROCESS
  TIMEOUT 300)
# Every src/redis/lua script compiles in a real redis-server (SCRIPT LOAD), and the compiled-in
# table is the directory.
sidelock_test(redis_lua_scripts_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_lua_scripts_test.cc
  LIBS sidelock_redis
  LABELS integration IN_PROCESS
  TIMEOUT 120)
