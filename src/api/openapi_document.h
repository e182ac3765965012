// The OpenAPI 3.1 document of every route (src/api/openapi.json), compiled in by CMake.
#pragma once

#include <string_view>

namespace sidelock::api {

/// The document's JSON text, as kept in the repository.
std::string_view openApiDocument();

}  // namespace sidelock::api
