#pragma once
// Hosts of their own for node processes, behind slow links: network
// namespaces on one Linux bridge, each host's uplink limited by a token
// bucket (tc's tbf) with a three-band priority queue inside it (the lane's
// bulk frames after the node connections' heartbeats), its rate changeable
// during a run. For the
// `wan` profile of bench tta. Needs root, iproute2 and the kernel's bridge,
// veth and tbf; netem (a delay) where the kernel has it. No CAF, no torch.

#include <stdexcept>
#include <string>
#include <vector>

namespace eg::bench {

/// Why hosts cannot be made here (not root, no namespaces, no tbf): the
/// benchmark is skipped with this message.
class wan_unavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class wan_hosts {
public:
  /// Hosts 1..rates.size() with the addresses `net`.N (e.g. "10.77.0"),
  /// each uplink limited to rates[N - 1] Mbit/s, and, where the kernel has
  /// netem, delayed by `delay_ms` (0: none). Throws
  /// wan_unavailable naming what failed (everything made is removed).
  wan_hosts(std::string tag, std::string net, std::vector<double> rates, double delay_ms = 0);
  /// Removes the namespaces, the links and the bridge.
  ~wan_hosts();
  wan_hosts(const wan_hosts&) = delete;
  wan_hosts& operator=(const wan_hosts&) = delete;

  /// Host `i`'s (0-based) uplink to `mbit` Mbit/s, now.
  void set_rate(size_t i, double mbit);
  /// The command prefix that runs a program on host `i`.
  std::vector<std::string> prefix(size_t i) const;
  /// Host `i`'s address.
  std::string address(size_t i) const;
  /// Whether the links are delayed (netem was there).
  bool delayed() const { return delayed_; }
  size_t size() const { return rates_.size(); }

private:
  std::string ns(size_t i) const;
  std::string veth(size_t i) const;
  void limit(size_t i, double mbit, bool change);
  void remove();

  std::string tag_, net_;
  std::vector<double> rates_;
  double delay_ms_ = 0;
  bool delayed_ = false;
};

} // namespace eg::bench
