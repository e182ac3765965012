#include "chaos/net_namespace.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <stdexcept>

#include "chaos/shell.h"

namespace sidelock::testing::chaos {

namespace {

constexpr const char* kNamePrefix = "sidelock-chaos-";
constexpr const char* kLossChain = "SIDELOCK_CHAOS_LOSS";

void runOrThrow(const std::string& command) {
  const ShellResult r = runShell(command);
  if (r.status != 0) throw std::runtime_error("`" + command + "` failed: " + r.output);
}

bool processRuns(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

/// Deletes our namespaces whose creating process is gone (a test killed before its destructor).
void deleteStaleNamespaces() {
  std::istringstream list(runShell("ip netns list").output);
  std::string line;
  while (std::getline(list, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (!name.starts_with(kNamePrefix)) continue;
    const long pid = std::strtol(name.c_str() + std::string(kNamePrefix).size(), nullptr, 10);
    if (!processRuns(pid)) runShell("ip netns del " + name);
  }
}

}  // namespace

std::string LossyNamespace::unavailableReason() {
  if (geteuid() != 0) return "needs root (CAP_NET_ADMIN) for a network namespace";
  if (runShell("ip -V").status != 0) return "`ip` (iproute2) is not installed";
  if (runShell("iptables --version").status != 0) return "`iptables` is not installed";
  deleteStaleNamespaces();
  const std::string probe = std::string(kNamePrefix) + "probe-" + std::to_string(getpid());
  const ShellResult made = runShell("ip netns add " + probe);
  if (made.status != 0) return "cannot create a network namespace: " + made.output;
  const ShellResult chain = runShell("ip netns exec " + probe + " iptables -N " + kLossChain);
  runShell("ip netns del " + probe);
  if (chain.status != 0) return "iptables does not work in a namespace: " + chain.output;
  return "";
}

LossyNamespace::LossyNamespace() {
  const long pid = getpid();
  name_ = kNamePrefix + std::to_string(pid);
  host_link_ = "slc" + std::to_string(pid) + "h";
  const std::string inside_link = "slc" + std::to_string(pid) + "n";
  // A /30 of 10.0.0.0/8 derived from the pid, so that two test processes never share one.
  const std::string net = "10." + std::to_string(100 + ((pid >> 14) & 0x7f)) + "." +
                          std::to_string((pid >> 6) & 0xff) + ".";
  const long base = (pid & 0x3f) << 2;
  host_address_ = net + std::to_string(base + 1);
  inside_address_ = net + std::to_string(base + 2);
  runShell("ip netns del " + name_);  // ours from an earlier run with the same pid, if any
  runShell("ip link del " + host_link_);
  try {
    runOrThrow("ip netns add " + name_);
    const std::string in_ns = "ip netns exec " + name_ + " ";
    runOrThrow("ip link add " + host_link_ + " type veth peer name " + inside_link);
    runOrThrow("ip link set " + inside_link + " netns " + name_);
    runOrThrow("ip addr add " + host_address_ + "/30 dev " + host_link_);
    runOrThrow("ip link set " + host_link_ + " up");
    runOrThrow(in_ns + "ip addr add " + inside_address_ + "/30 dev " + inside_link);
    runOrThrow(in_ns + "ip link set " + inside_link + " up");
    runOrThrow(in_ns + "ip link set lo up");
    runOrThrow(in_ns + "iptables -N " + kLossChain);
    runOrThrow(in_ns + "iptables -I INPUT -j " + kLossChain);
    runOrThrow(in_ns + "iptables -I OUTPUT -j " + kLossChain);
  } catch (...) {
    runShell("ip netns del " + name_);
    runShell("ip link del " + host_link_);
    throw;
  }
}

LossyNamespace::~LossyNamespace() {
  runShell("ip netns del " + name_);
  runShell("ip link del " + host_link_);  // already gone with its peer, unless the move failed
}

std::vector<std::string> LossyNamespace::commandPrefix() const {
  return {"ip", "netns", "exec", name_};
}

void LossyNamespace::setLoss(double probability) {
  const std::string iptables = "ip netns exec " + name_ + " iptables ";
  runOrThrow(iptables + "-F " + kLossChain);
  if (probability <= 0) return;
  runOrThrow(iptables + "-A " + kLossChain + " -m statistic --mode random --probability " +
             std::to_string(probability) + " -j DROP");
}

}  // namespace sidelock::testing::chaos
