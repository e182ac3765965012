#include "common/pod_identity.h"

#include <unistd.h>

#include <cstdlib>

namespace sidelock {

std::optional<std::string> systemGetenv(const char* name) {
  const char* v = ::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string systemHostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string();
}

std::string podIdentity(const EnvLookup& getenv, const std::function<std::string()>& host_name) {
  if (std::optional<std::string> pod = getenv("POD_NAME"); pod && !pod->empty()) return *pod;
  return host_name ? host_name() : std::string();
}

}  // namespace sidelock
