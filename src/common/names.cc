#include "common/names.h"

#include <cstdio>

namespace sidelock {

std::string lockNameProblem(std::string_view name, size_t max_bytes) {
  if (name.empty()) return "the lock name is empty";
  if (name.size() > max_bytes) {
    return "the lock name is " + std::to_string(name.size()) + " bytes long; the limit is " +
           std::to_string(max_bytes);
  }
  if (name == "." || name == "..") {
    std::string problem = "\"";  // appended, not `"\"" + ...`: gcc 12 warns (-Wrestrict) there
    problem.append(name).append("\" is not a lock name (HTTP clients rewrite it as a path)");
    return problem;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '~';
    if (ok) continue;
    char shown[8];
    std::snprintf(shown, sizeof(shown), c >= 0x21 && c <= 0x7e ? "'%c'" : "0x%02X", c);
    return "the lock name has " + std::string(shown) + " at byte " + std::to_string(i + 1) +
           "; lock names are A-Z a-z 0-9 and - _ . : @ ~";
  }
  return "";
}

namespace {

// A public label (a candidate, a holder) named `field`: 1..kMaxCandidateBytes printable ASCII.
std::string labelProblem(std::string_view field, std::string_view label) {
  const std::string what(field);
  if (label.empty()) return what + " is empty";
  if (label.size() > kMaxCandidateBytes) {
    return what + " is " + std::to_string(label.size()) + " bytes long; the limit is " +
           std::to_string(kMaxCandidateBytes);
  }
  for (unsigned char c : label) {
    if (c < 0x20 || c > 0x7e) return what + " must be printable ASCII (0x20..0x7e)";
  }
  return "";
}

}  // namespace

std::string candidateProblem(std::string_view candidate) {
  return labelProblem("candidate", candidate);
}

std::string holderProblem(std::string_view holder) { return labelProblem("holder", holder); }

}  // namespace sidelock
