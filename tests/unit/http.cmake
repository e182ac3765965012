sidelock_test(http_router_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_router_test.cc
  LIBS sidelock_http nlohmann_json::nlohmann_json
  LABELS unit)
sidelock_test(http_parser_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_parser_test.cc
  LIBS sidelock_http
  LABELS unit)
# nghttp2's pooled allocator (src/http/http2_memory.h): sizes, reuse, realloc's contract.
sidelock_test(http2_memory_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http2_memory_test.cc
  LIBS sidelock_http
  LABELS unit)
