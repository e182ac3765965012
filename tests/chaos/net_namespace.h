// A network namespace made by the test, joined to this one by a veth pair, where packets can be
// really lost: an iptables chain of our own inside the namespace drops a random share of them
// (`-m statistic --mode random`). Nothing is changed outside the namespace except the host end
// of the veth pair, and both go away with the namespace. `tc netem` does not work on this
// machine; iptables does.
#pragma once

#include <string>
#include <vector>

namespace sidelock::testing::chaos {

class LossyNamespace {
 public:
  /// Why a namespace cannot be made here (not root, no CAP_NET_ADMIN, no `ip` or `iptables`);
  /// empty when it can. Also deletes namespaces left behind by earlier test processes that died
  /// (their names carry a pid that no longer runs).
  static std::string unavailableReason();

  /// Creates "sidelock-chaos-<pid>" with the veth pair and an empty loss chain; throws
  /// std::runtime_error naming the command that failed.
  LossyNamespace();
  /// Deletes the namespace (and with it the veth pair and the chain).
  ~LossyNamespace();
  LossyNamespace(const LossyNamespace&) = delete;
  LossyNamespace& operator=(const LossyNamespace&) = delete;

  /// Words that run a command inside the namespace (`ip netns exec <name>`).
  std::vector<std::string> commandPrefix() const;
  /// The namespace's end of the veth pair: servers inside bind to it, the host reaches them there.
  const std::string& insideAddress() const { return inside_address_; }
  /// Drops each packet entering or leaving the namespace with this probability (0: none).
  void setLoss(double probability);

 private:
  std::string name_;
  std::string host_link_;
  std::string host_address_;
  std::string inside_address_;
};

}  // namespace sidelock::testing::chaos
