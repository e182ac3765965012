# The gRPC gateway's JSON bridge (src/api/grpc_gateway.h): method table, status table, messages
# <-> JSON, the responder, Health/Watch, with a fake ServerCall and a fake route handler.
sidelock_test(grpc_gateway_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/grpc_gateway_test.cc
  LIBS sidelock_api nlohmann_json::nlohmann_json
  LABELS unit)
