sidelock_test(cluster_unit_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/slot_map_test.cc ${CMAKE_CURRENT_LIST_DIR}/config_cluster_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/metrics_forget_node_test.cc
  LIBS sidelock_redis sidelock_config
  LABELS unit)
