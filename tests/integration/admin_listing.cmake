sidelock_test(admin_listing_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admin_listing_test.cc
  LIBS nlohmann_json::nlohmann_json
  LABELS integration
  TIMEOUT 300)
add_dependencies(admin_listing_test sidelock)
