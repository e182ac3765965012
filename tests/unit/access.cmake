sidelock_test(access_policy_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/access_policy_test.cc
  LIBS sidelock_api sidelock_config
  LABELS unit)
