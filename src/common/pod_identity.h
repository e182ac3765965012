// Who this pod is: the name the sidecar campaigns under for its configured elections (config
// `identity`) and the candidate of `sidelock run --elect`. One rule for both, so a pod's sidecar
// and the app it runs name the pod alike.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace sidelock {

/// Reads an environment variable: nullopt when unset or empty (RunEnvironment's getenv, tests'
/// fakes).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

/// The process environment, as an EnvLookup.
std::optional<std::string> systemGetenv(const char* name);
/// gethostname(); "" if unknown.
std::string systemHostName();

/// $POD_NAME (the Helm chart sets it from the downward API), else `host_name()` (when given),
/// else "". An empty $POD_NAME counts as unset.
std::string podIdentity(const EnvLookup& getenv, const std::function<std::string()>& host_name);

}  // namespace sidelock
