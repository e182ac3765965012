#include "grpc/server_call.h"

namespace sidelock::grpc {

std::string_view CallInfo::header(std::string_view lower_name) const {
  for (const auto& [name, value] : metadata) {
    if (name == lower_name) return value;
  }
  return {};
}

}  // namespace sidelock::grpc
