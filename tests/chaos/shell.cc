#include "chaos/shell.h"

#include <array>
#include <cstdio>

namespace sidelock::testing::chaos {

ShellResult runShell(const std::string& command) {
  ShellResult result;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return result;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) result.output.append(buf.data(), n);
  result.status = pclose(p);
  return result;
}

}  // namespace sidelock::testing::chaos
